"""The Litestar middleware that authenticates every request but the open probes.

Mount it with :func:`auth_middleware`::

    Litestar(..., middleware=[auth_middleware(authenticator)])

A handler then reads ``request.user`` (an :class:`Identity`). A failure never reaches
the handler: the middleware answers itself, 401 with ``WWW-Authenticate: Bearer``, or
503 with ``Retry-After`` when the issuer's keys cannot be fetched or the database
cannot be asked about a key, with ``{"error": {"code": ..., "message": ...}}``.
Answering here rather than raising keeps the status right for metrics middleware
outside this one. A handler opts out with ``opt={"exclude_from_auth": True}``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec
from litestar.connection import ASGIConnection
from litestar.enums import ScopeType
from litestar.middleware import (
    AbstractAuthenticationMiddleware,
    AuthenticationResult,
    DefineMiddleware,
)

# The predicate AbstractAuthenticationMiddleware.__call__ itself uses (Litestar 2.x).
from litestar.middleware._utils import should_bypass_middleware
from litestar.types import ASGIApp, Message, Method, Receive, Scope, Scopes, Send

from gateway.auth.actor import ACTOR_SCOPE_KEY, SessionActor
from gateway.auth.authenticator import Authenticator
from gateway.auth.errors import (
    AuthenticationError,
    InvalidCredentialsError,
    MissingCredentialsError,
)
from gateway.errors import error_body

__all__ = [
    "DEFAULT_EXCLUDE_PATHS",
    "AuthenticationMiddleware",
    "auth_middleware",
    "one_authorization",
    "send_refusal",
]

DEFAULT_EXCLUDE_PATHS: tuple[str, ...] = ("^/healthz$", "^/readyz$", "^/schema(?:/|$)")
"""Paths (regular expressions) served without credentials: the probes and the OpenAPI schema."""

WEBSOCKET_POLICY_VIOLATION = 1008


class AuthenticationMiddleware(AbstractAuthenticationMiddleware):
    """Sets ``scope["user"]`` to the caller's :class:`Identity` or answers with an error."""

    __slots__ = ("_log", "authenticator", "realm")

    def __init__(
        self,
        app: ASGIApp,
        authenticator: Authenticator,
        exclude: str | list[str] | None = None,
        exclude_from_auth_key: str = "exclude_from_auth",
        exclude_http_methods: Sequence[Method] | None = None,
        scopes: Scopes | None = None,
        realm: str = "ignara",
    ) -> None:
        super().__init__(
            app,
            exclude=list(DEFAULT_EXCLUDE_PATHS) if exclude is None else exclude,
            exclude_from_auth_key=exclude_from_auth_key,
            exclude_http_methods=exclude_http_methods,
            scopes=scopes,
        )
        self.authenticator = authenticator
        self.realm = realm
        self._log = logging.getLogger(__name__)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if should_bypass_middleware(
            exclude_http_methods=self.exclude_http_methods,
            exclude_opt_key=self.exclude_opt_key,
            exclude_path_pattern=self.exclude,
            scope=scope,
            scopes=self.scopes,
        ):
            await self.app(scope, receive, send)
            return
        try:
            result = await self.authenticate_request(ASGIConnection(scope))
        except AuthenticationError as err:
            if err.status_code == 401:  # a 503's cause is logged once per outage, not per call
                self._log.info("authentication refused (%s) for %r", err.code, scope["path"])
            await self._refuse(scope, send, err)
            return
        scope["user"] = result.user
        scope["auth"] = result.auth
        await self.app(scope, receive, send)

    async def authenticate_request(self, connection: ASGIConnection) -> AuthenticationResult:  # type: ignore[type-arg]
        # A console session's call, made in-process (gateway.auth.actor): no network
        # request's scope can carry this key.
        actor = connection.scope.get(ACTOR_SCOPE_KEY)
        if isinstance(actor, SessionActor):
            identity = await self.authenticator.authenticate_actor(actor)
            return AuthenticationResult(user=identity, auth=identity.via)
        values = connection.headers.getall("authorization", [])
        identity = await self.authenticator.authenticate(one_authorization(values))
        return AuthenticationResult(user=identity, auth=identity.via)

    async def _refuse(self, scope: Scope, send: Send, err: AuthenticationError) -> None:
        if scope["type"] == ScopeType.WEBSOCKET:
            close: Message = {
                "type": "websocket.close",
                "code": WEBSOCKET_POLICY_VIOLATION,
                "reason": err.code,
            }
            await send(close)
            return
        await send_refusal(send, err, self.realm)


def one_authorization(values: Sequence[str]) -> str | None:
    """The request's ``Authorization`` header value (None if absent); several are refused."""
    if len(values) > 1:
        raise InvalidCredentialsError("Send one Authorization header, not several.")
    return values[0] if values else None


async def send_refusal(send: Send, err: AuthenticationError, realm: str) -> None:
    """Answer a failed authentication over HTTP: its status, a JSON body, for a 401
    the RFC 6750 challenge, and for a 503 when to try again."""
    body = msgspec.json.encode(error_body(err.status_code, err.code, err.message))
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode("ascii")),
        (b"cache-control", b"no-store"),
    ]
    if err.status_code == 401:
        headers.append((b"www-authenticate", _challenge(err, realm).encode("latin-1")))
    if err.retry_after is not None:
        headers.append((b"retry-after", err.retry_after.encode("ascii")))
    start: Message = {"type": "http.response.start", "status": err.status_code, "headers": headers}
    await send(start)
    end: Message = {"type": "http.response.body", "body": body, "more_body": False}
    await send(end)


def _challenge(err: AuthenticationError, realm: str) -> str:
    """The RFC 6750 challenge: bare when no credential was sent, else ``invalid_token``."""
    if isinstance(err, MissingCredentialsError):
        return f'Bearer realm="{realm}"'
    return f'Bearer realm="{realm}", error="invalid_token"'


def auth_middleware(
    authenticator: Authenticator,
    *,
    exclude: Sequence[str] = DEFAULT_EXCLUDE_PATHS,
    realm: str = "ignara",
) -> DefineMiddleware:
    """The middleware, ready for ``Litestar(middleware=[...])``. Close the authenticator
    (``await authenticator.aclose()``) on shutdown."""
    return DefineMiddleware(
        AuthenticationMiddleware, authenticator=authenticator, exclude=list(exclude), realm=realm
    )
