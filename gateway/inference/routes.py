"""The OpenAI-compatible calls as a plain ASGI app, ahead of Litestar's router.

``POST /v1/chat/completions``, ``/v1/completions`` and ``/v1/embeddings`` are the hot
path, and all their rules live in :class:`InferenceService`. This app only does what
Litestar did around them: authenticate the caller (the same authenticator, checks
and refusals as :mod:`gateway.auth.middleware`), read the body (at most
:data:`MAX_BODY_BYTES`), hand both to the service and send its answer; a streamed
answer goes out through Litestar's own streaming response, which also cancels the
stream when the client leaves. Skipping Litestar's router, middleware stack, request
object and handler signature takes about 0.11 ms of CPU off every call and as much
off its latency at concurrency 1 on the benchmark machine (``bench/proxy.py``,
interleaved runs). ``GET /v1/models`` and every other route stay with Litestar
(:mod:`gateway.inference.controllers`); :class:`gateway.app.GatewayApp` sends
requests here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, cast

import msgspec
from litestar.enums import ScopeType
from litestar.response.streaming import ASGIStreamingResponse
from litestar.types import HTTPRequestEvent, HTTPScope, Message, Receive, Scope, Send

from gateway.auth import Authenticator
from gateway.auth.errors import AuthenticationError
from gateway.auth.middleware import one_authorization, send_refusal
from gateway.inference.calls import CallKind
from gateway.inference.problems import InferenceError
from gateway.inference.service import Answer, InferenceService
from gateway.observability import Observability
from gateway.observability.access import AccessNote
from gateway.outages import DATABASE_RETRY_AFTER, Outage, database_unavailable

__all__ = ["MAX_BODY_BYTES", "ROUTES", "InferenceRoutes"]

MAX_BODY_BYTES = 8 * 1024 * 1024

ROUTES: Mapping[str, CallKind] = {
    "/v1/chat/completions": CallKind.CHAT,
    "/v1/completions": CallKind.COMPLETIONS,
    "/v1/embeddings": CallKind.EMBEDDINGS,
}

log = logging.getLogger(__name__)


class _ClientLeftError(Exception):
    """The client left before its request body arrived: nobody to answer."""


class InferenceRoutes:
    """Serves the calls of :data:`ROUTES` for ``service``, authenticated by ``authenticator``.

    Usage::

        routes = InferenceRoutes(authenticator, service)
        if (kind := routes.kind_of(scope)) is not None:
            await routes.serve(kind, scope, receive, send)
    """

    def __init__(
        self,
        authenticator: Authenticator,
        service: InferenceService,
        *,
        realm: str = "ignara",
        max_body_bytes: int = MAX_BODY_BYTES,
        database_outage: Outage | None = None,
        observe: Observability | None = None,
    ) -> None:
        observe = observe or Observability()
        self._tracing = observe.tracing
        self._span = observe.span
        self._access = observe.access is not None  # notes for the access log line
        self._log_prompts = observe.log_prompts
        self._authenticator = authenticator
        self._service = service
        self._database_outage = database_outage or Outage("database")
        self._realm = realm
        self._max_body_bytes = max_body_bytes

    @staticmethod
    def kind_of(scope: Scope) -> CallKind | None:
        """The call an HTTP request is for, if it is on one of :data:`ROUTES`."""
        if scope["type"] != ScopeType.HTTP:  # also lifespan and websocket
            return None
        path = scope["path"]
        return ROUTES.get(path[:-1] if path.endswith("/") else path)

    @staticmethod
    def route_of(scope: Scope) -> str:
        """The route (template) of a request :meth:`kind_of` found to be one of ours."""
        path: str = scope["path"]
        return path[:-1] if path.endswith("/") else path

    async def serve(self, kind: CallKind, scope: HTTPScope, receive: Receive, send: Send) -> None:
        """Answer one request that :meth:`kind_of` found to be for ``kind``."""
        if self._tracing is None:
            await self._serve(kind, scope, receive, send)
            return
        route = self.route_of(scope)
        attributes = {"http.request.method": scope["method"], "http.route": route}
        with self._tracing.span(f"{scope['method']} {route}", attributes, server=True) as span:
            status = 0

            async def sending(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            await self._serve(kind, scope, receive, sending)
            span.set_attribute("http.response.status_code", status)

    async def _serve(self, kind: CallKind, scope: HTTPScope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await _send_problem(send, _NOT_ALLOWED)
            return
        headers, authorizations = _headers(scope)
        access = None
        if self._access:  # read by gateway.app's access log line once the answer is out
            access = cast("dict[str, Any]", scope)["ignara.access"] = AccessNote()
        try:
            with self._span("auth"):
                identity = await self._authenticator.authenticate(one_authorization(authorizations))
            if access is not None:
                cast("dict[str, Any]", scope)["user"] = identity
            raw = await self._body(receive, headers.get("content-length"))
            if access is not None and self._log_prompts:
                access.prompt = _prompt_of(raw)
            answer = await self._service.handle(identity, kind, raw, headers, access)
        except AuthenticationError as err:
            if err.status_code == 401:  # a 503's cause is logged once per outage, not per call
                log.info("authentication refused (%s) for %r", err.code, scope["path"])
            await send_refusal(send, err, self._realm)
            return
        except _ClientLeftError:
            return
        except InferenceError as problem:
            await _send_problem(send, problem)
            return
        except Exception as err:  # the ASGI boundary: JSON, whatever went wrong
            if not database_unavailable(err):  # a bug: its trace logged, as Litestar does
                log.exception("unhandled error on POST %s", scope["path"])
                await _send_problem(send, _INTERNAL_ERROR)
                return
            self._database_outage.failed(err)  # said once per outage, not per call
            await _send_problem(send, _DATABASE_UNAVAILABLE)
            return
        if isinstance(answer, Answer):
            content = [(b"content-type", answer.media_type.encode("latin-1"))]
            await _send(send, answer.status, _encode(answer.headers) + content, answer.body)
            return
        streaming = ASGIStreamingResponse(
            iterator=answer.chunks,
            status_code=answer.status,
            headers=answer.headers,
            media_type=answer.media_type,
        )
        await streaming(scope, receive, send)

    async def _body(self, receive: Receive, declared: str | None) -> bytes:
        limit = self._max_body_bytes
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _too_large(limit)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientLeftError
            chunk = cast("HTTPRequestEvent", message).get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
            if not cast("HTTPRequestEvent", message).get("more_body", False):
                return b"".join(chunks)


_JSON = [(b"content-type", b"application/json")]

_INTERNAL_ERROR = InferenceError(500, "api_error", "internal error", code="internal_error")

_DATABASE_UNAVAILABLE = InferenceError(
    503,
    "api_error",
    "the database is unavailable; retry shortly",
    code="database_unavailable",
    headers={"retry-after": DATABASE_RETRY_AFTER},
)

_NOT_ALLOWED = InferenceError(
    405,
    "invalid_request_error",
    "this route takes POST only",
    code="method_not_allowed",
    headers={"allow": "POST"},
)


_PROMPT_LOG_CHARS = 4096


def _prompt_of(raw: bytes) -> Any:
    """What the caller sent (messages, prompt or input), for an access line: at most
    :data:`_PROMPT_LOG_CHARS` characters of its JSON."""
    try:
        body = msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    if not isinstance(body, dict):
        return None
    for name in ("messages", "prompt", "input"):
        if name in body:
            text = msgspec.json.encode(body[name]).decode()
            return text[:_PROMPT_LOG_CHARS]
    return None


def _too_large(limit: int) -> InferenceError:
    return InferenceError(
        413,
        "invalid_request_error",
        f"the request body is larger than {limit} bytes",
        code="request_too_large",
    )


def _headers(scope: HTTPScope) -> tuple[dict[str, str], list[str]]:
    """The request's headers by (lower-case) name, the first of each name, as Litestar's
    ``dict(request.headers)`` gives them; and every Authorization value."""
    headers: dict[str, str] = {}
    authorizations: list[str] = []
    for raw_name, raw_value in scope["headers"]:
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers.setdefault(name, value)
        if name == "authorization":
            authorizations.append(value)
    return headers, authorizations


def _encode(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]


async def _send_problem(send: Send, problem: InferenceError) -> None:
    await _send(send, problem.status, _encode(problem.headers) + _JSON, problem.body())


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    """One whole response; ``content-length`` is added here (no caller gives one)."""
    length = (b"content-length", str(len(body)).encode("ascii"))
    start: Message = {
        "type": "http.response.start",
        "status": status,
        "headers": [*headers, length],
    }
    await send(start)
    end: Message = {"type": "http.response.body", "body": body, "more_body": False}
    await send(end)
