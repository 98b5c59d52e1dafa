"""Console sign-in through the OIDC provider: authorization code flow with PKCE (S256).

``GET /console/oidc/login`` keeps a fresh ``state``, ``nonce`` and PKCE verifier
server-side (a pending sign-in in the session store, named by its own cookie) and sends
the browser to the provider's authorization endpoint with the state, the nonce and the
verifier's S256 challenge. ``GET /console/oidc/callback`` takes that pending sign-in,
once (a replayed state finds nothing), checks the state the provider sent back against
it, redeems the code with the verifier (authlib's client), and verifies the ID token
with the issuer's keys (:class:`~gateway.auth.oidc.OidcVerifier`: signature by JWKS,
issuer, audience = this client, expiry) and its nonce. Its claims map to a principal
exactly as a bearer token's do; only a platform or tenant admin gets a session.

The pending sign-in's cookie is ``SameSite=Lax``, not ``Strict`` like the session's: the
provider's redirect back is a cross-site navigation, which carries only Lax cookies.
For the same reason the callback answers with a page that moves on to the dashboard,
rather than a redirect, so the dashboard's request is same-site and carries the
session's Strict cookie.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import urlsplit

import httpx
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.httpx_client import AsyncOAuth2Client
from authlib.oauth2.rfc6749.errors import OAuth2Error
from litestar import Controller, Request, Response, get
from litestar.enums import MediaType
from litestar.params import QueryParameter
from litestar.response import Redirect

from gateway.auth import AuthenticationError, Identity, OidcVerifier
from gateway.auth.actor import SessionActor
from gateway.console.html import esc, layout, message
from gateway.console.pages import (
    COOKIE,
    console_role,
    oidc_of,
    sessions_of,
    set_session_cookie,
)

__all__ = ["OIDC_COOKIE", "ConsoleOidc", "OidcController", "OidcSignInError"]

OIDC_COOKIE = "ignara_console_oidc"
DISCOVERY = "/.well-known/openid-configuration"
TIMEOUT_SECONDS = 10.0
MAX_DOCUMENT_BYTES = 64 * 1024

log = logging.getLogger(__name__)

Param = Annotated[str | None, QueryParameter(max_length=2048, required=False)]
# "state" is a name Litestar keeps for the app's state: the parameter is read by alias.
StateParam = Annotated[str | None, QueryParameter(name="state", max_length=2048, required=False)]


class OidcSignInError(Exception):
    """A sign-in the provider or its answer did not allow; the message is for people."""

    def __init__(self, message: str, status: int = 401) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def _checked_endpoint(url: object, name: str) -> str:
    """An endpoint of the discovery document: https, or http on a loopback host."""
    if not isinstance(url, str) or len(url) > 2048:
        raise OidcSignInError(f"The provider's discovery document has no {name}.", 502)
    parts = urlsplit(url)
    loopback = parts.hostname in {"localhost", "127.0.0.1", "::1"}
    if parts.scheme != "https" and not (parts.scheme == "http" and loopback):
        raise OidcSignInError(f"The provider's {name} is not an https URL.", 502)
    return url


@dataclass
class ConsoleOidc:
    """One provider's sign-in, for the console: its client and where it sends back."""

    verifier: OidcVerifier
    client_id: str
    client_secret: str | None = field(default=None, repr=False)
    provider_name: str = "OIDC"
    redirect_uri: str | None = None
    scopes: str = "openid profile email"
    _endpoints: tuple[str, str] | None = field(default=None, init=False, repr=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)

    @property
    def issuer(self) -> str:
        return self.verifier.settings.issuer

    def redirect_for(self, request: Request[Any, Any, Any]) -> str:
        if self.redirect_uri:
            return self.redirect_uri
        return str(request.base_url).rstrip("/") + "/console/oidc/callback"

    async def endpoints(self) -> tuple[str, str]:
        """The provider's authorization and token endpoints, from its discovery
        document (read once; a failure is tried again at the next sign-in)."""
        async with self._lock:
            if self._endpoints is None:
                self._endpoints = await self._discover()
            return self._endpoints

    async def _discover(self) -> tuple[str, str]:
        url = self.issuer.rstrip("/") + DISCOVERY
        try:
            async with httpx.AsyncClient(timeout=TIMEOUT_SECONDS) as client:
                answer = await client.get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as err:
            log.warning("OIDC discovery at %s failed: %s", url, err)
            raise OidcSignInError("The sign-in provider cannot be reached.", 502) from err
        if answer.status_code != 200 or len(answer.content) > MAX_DOCUMENT_BYTES:
            raise OidcSignInError("The sign-in provider's discovery document is unusable.", 502)
        try:
            document = answer.json()
        except ValueError as err:
            raise OidcSignInError(
                "The sign-in provider's discovery document is not JSON.", 502
            ) from err
        if not isinstance(document, dict) or document.get("issuer") != self.issuer:
            raise OidcSignInError("The sign-in provider names another issuer.", 502)
        methods = document.get("code_challenge_methods_supported")
        if isinstance(methods, list) and "S256" not in methods:
            raise OidcSignInError("The sign-in provider does not support PKCE S256.", 502)
        return (
            _checked_endpoint(document.get("authorization_endpoint"), "authorization endpoint"),
            _checked_endpoint(document.get("token_endpoint"), "token endpoint"),
        )

    def _client(self, redirect_uri: str) -> AsyncOAuth2Client:
        return AsyncOAuth2Client(
            client_id=self.client_id,
            client_secret=self.client_secret,
            token_endpoint_auth_method="client_secret_basic" if self.client_secret else "none",
            scope=self.scopes,
            redirect_uri=redirect_uri,
            code_challenge_method="S256",
            timeout=TIMEOUT_SECONDS,
            follow_redirects=False,
        )

    async def start(self, redirect_uri: str) -> tuple[str, dict[str, str]]:
        """Where to send the browser, and what to keep until it comes back."""
        authorize, _ = await self.endpoints()
        pending = {
            "state": secrets.token_urlsafe(32),
            "nonce": secrets.token_urlsafe(32),
            "verifier": secrets.token_urlsafe(64),  # 86 characters: RFC 7636 wants 43-128
            "redirect_uri": redirect_uri,
        }
        async with self._client(redirect_uri) as client:
            url, _ = client.create_authorization_url(
                authorize,
                state=pending["state"],
                nonce=pending["nonce"],
                code_verifier=pending["verifier"],
            )
        return url, pending

    async def finish(
        self, pending: dict[str, str], state: str | None, code: str | None
    ) -> Identity:
        """The identity the provider vouches for, or :class:`OidcSignInError`."""
        expected = pending.get("state", "")
        if not state or not expected or not hmac.compare_digest(state, expected):
            raise OidcSignInError("The sign-in's state does not match: start again.", 400)
        verifier, nonce = pending.get("verifier"), pending.get("nonce")
        redirect_uri = pending.get("redirect_uri")
        if not verifier or not nonce or not redirect_uri:
            raise OidcSignInError("This sign-in lost its PKCE verifier: start again.", 400)
        if not code:
            raise OidcSignInError("The provider sent no authorization code.", 400)
        _, token_endpoint = await self.endpoints()
        async with self._client(redirect_uri) as client:
            try:
                token = await client.fetch_token(
                    token_endpoint,
                    grant_type="authorization_code",
                    code=code,
                    code_verifier=verifier,
                    redirect_uri=redirect_uri,
                )
            except (OAuth2Error, OAuthError) as err:
                raise OidcSignInError(
                    f"The provider refused the code ({err.error or 'error'})."
                ) from err
            except (httpx.HTTPError, ValueError) as err:  # no answer, or not a token's
                raise OidcSignInError("The sign-in provider did not redeem the code.", 502) from err
        id_token = token.get("id_token") if isinstance(token, dict) else None
        if not isinstance(id_token, str):
            raise OidcSignInError("The provider sent no ID token.")
        try:
            claims = await self.verifier.verified_claims(id_token, audience=self.client_id)
            identity = self.verifier.identity_of(claims)
        except AuthenticationError as err:
            raise OidcSignInError(f"The provider's ID token was refused: {err.message}") from err
        sent = claims.get("nonce")
        if not isinstance(sent, str) or not hmac.compare_digest(sent, nonce):
            raise OidcSignInError("The ID token's nonce does not match this sign-in.")
        return identity


def _page(title: str, body: str, status: int) -> Response[str]:
    return Response(layout(title, body), status_code=status, media_type=MediaType.HTML)


def _refusal(err: OidcSignInError) -> Response[str]:
    body = message("error", esc(err.message), test_id="login-error") + (
        '<p><a href="/console/login">Back to sign-in</a></p>'
    )
    response = _page("Sign-in refused", body, err.status)
    response.delete_cookie(OIDC_COOKIE, path="/console/oidc")
    return response


class OidcController(Controller):
    """``/console/oidc/login`` and ``/console/oidc/callback``."""

    path = "/oidc"
    include_in_schema = False

    @get("/login")
    async def oidc_login(self, request: Request[Any, Any, Any]) -> Response[Any]:
        oidc = oidc_of(request)
        if oidc is None:
            return _page("Not found", message("error", "OIDC sign-in is not configured."), 404)
        try:
            url, pending = await oidc.start(oidc.redirect_for(request))
        except OidcSignInError as err:
            return _refusal(err)
        pending_id = await sessions_of(request).begin_pending(pending)
        response = Redirect(url, status_code=303)
        response.set_cookie(
            OIDC_COOKIE,
            pending_id,
            path="/console/oidc",
            max_age=600,
            httponly=True,
            samesite="lax",
            secure=request.url.scheme == "https",
        )
        return response

    @get("/callback")
    async def oidc_callback(
        self,
        request: Request[Any, Any, Any],
        oauth_state: StateParam = None,
        code: Param = None,
        error: Param = None,
    ) -> Response[Any]:
        oidc = oidc_of(request)
        if oidc is None:
            return _page("Not found", message("error", "OIDC sign-in is not configured."), 404)
        store = sessions_of(request)
        # Taken whatever happens next: a state is good for one try.
        pending = await store.take_pending(request.cookies.get(OIDC_COOKIE))
        if pending is None:
            return _refusal(
                OidcSignInError(
                    "This sign-in is unknown, expired or already used: start again.", 400
                )
            )
        if error:
            return _refusal(OidcSignInError(f"The provider refused the sign-in ({error[:100]})."))
        try:
            identity = await oidc.finish(pending, oauth_state, code)
        except OidcSignInError as err:
            return _refusal(err)
        if not console_role(identity):
            return _refusal(
                OidcSignInError(
                    f"{identity.principal} signed in, but is neither a platform nor a tenant "
                    "admin: the console is for admins only.",
                    403,
                )
            )
        old = await store.get(request.cookies.get(COOKIE))
        session = await store.sign_in(
            old,
            SessionActor(
                kind="oidc",
                principal=identity.principal,
                tenant=identity.tenant,
                roles=identity.roles,
                scopes=identity.scopes,
            ),
        )
        body = (
            '<meta http-equiv="refresh" content="0;url=/console/dashboard">'
            + message("ok", f"Signed in as {esc(identity.principal)}.", test_id="oidc-signed-in")
            + '<p><a href="/console/dashboard">Continue to the dashboard</a></p>'
        )
        response = _page("Signed in", body, 200)
        response.delete_cookie(OIDC_COOKIE, path="/console/oidc")
        return set_session_cookie(request, response, session)
