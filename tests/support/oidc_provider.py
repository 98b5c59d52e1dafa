"""A small OpenID Connect provider for tests, speaking the real protocol over HTTP on
127.0.0.1: discovery document, JWKS, an authorization endpoint that signs in whoever
the test says (no form) and redirects back with a code, and a token endpoint that
redeems a code once, for the client and redirect URI it was issued to, only with the
PKCE verifier whose S256 challenge it was issued for, and answers with an RS256 ID
token signed by joserfc (nonce, audience = the client, issuer, expiry).

    async with oidc_provider(clients={"console": None}) as idp:
        idp.user = {"sub": "ada", "tenant": "alpha", "roles": ["tenant-admin"]}
        ... idp.issuer, idp.jwks_uri ...

``idp.id_token_overrides`` changes claims of the next ID tokens (a wrong ``aud``,
``nonce`` or ``iss``, an ``exp`` in the past), and ``idp.sign_with_unknown_key``
signs them with a key the JWKS does not publish: each attack a client must refuse.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from joserfc import jwt
from joserfc.jwk import RSAKey
from litestar import Litestar, Request, Response, get, post
from litestar.response import Redirect

from tests.support.serve import serving

__all__ = ["Provider", "oidc_provider", "s256"]

CODE_SECONDS = 60


def s256(verifier: str) -> str:
    """RFC 7636's S256 challenge of a verifier."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


@dataclass
class Grant:
    client_id: str
    redirect_uri: str
    challenge: str
    nonce: str | None
    claims: dict[str, Any]
    issued: float


@dataclass
class Provider:
    """The provider's state, which tests read and steer."""

    clients: dict[str, str | None]  # client id -> secret (None: a public client)
    issuer: str = ""
    user: dict[str, Any] = field(default_factory=lambda: {"sub": "someone"})
    id_token_overrides: dict[str, Any] = field(default_factory=dict)
    sign_with_unknown_key: bool = False
    key: RSAKey = field(default_factory=lambda: RSAKey.generate_key(2048, {"kid": "idp-1"}))
    stranger: RSAKey = field(default_factory=lambda: RSAKey.generate_key(2048, {"kid": "idp-1"}))
    grants: dict[str, Grant] = field(default_factory=dict)
    token_requests: list[dict[str, str]] = field(default_factory=list)

    @property
    def jwks_uri(self) -> str:
        return f"{self.issuer}/jwks"

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": self.jwks_uri,
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none", "client_secret_basic"],
            "grant_types_supported": ["authorization_code"],
        }

    def authorize(self, query: dict[str, str]) -> tuple[int, str]:
        """(status, location or error) for an authorization request."""
        client_id = query.get("client_id", "")
        redirect_uri = query.get("redirect_uri", "")
        if client_id not in self.clients or not redirect_uri:
            return 400, "unknown client or no redirect_uri"
        back = {"state": query["state"]} if "state" in query else {}
        if query.get("response_type") != "code":
            back["error"] = "unsupported_response_type"
        elif query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            back["error"] = "invalid_request"  # this provider insists on PKCE S256
        elif "openid" not in query.get("scope", "").split():
            back["error"] = "invalid_scope"
        else:
            code = secrets.token_urlsafe(24)
            self.grants[code] = Grant(
                client_id=client_id,
                redirect_uri=redirect_uri,
                challenge=query["code_challenge"],
                nonce=query.get("nonce"),
                claims=dict(self.user),
                issued=time.time(),
            )
            back["code"] = code
        return 302, f"{redirect_uri}?{urlencode(back)}"

    def token(self, form: dict[str, str], authorization: str | None) -> tuple[int, dict[str, Any]]:
        self.token_requests.append(dict(form))
        client_id, secret = form.get("client_id", ""), form.get("client_secret")
        if authorization and authorization.lower().startswith("basic "):
            raw = base64.b64decode(authorization[6:]).decode()
            client_id, _, secret = raw.partition(":")
        if client_id not in self.clients:
            return 401, {"error": "invalid_client"}
        expected = self.clients[client_id]
        if expected is not None and not hmac.compare_digest(secret or "", expected):
            return 401, {"error": "invalid_client"}
        if form.get("grant_type") != "authorization_code":
            return 400, {"error": "unsupported_grant_type"}
        grant = self.grants.pop(form.get("code", ""), None)  # a code is good once
        if grant is None or time.time() - grant.issued > CODE_SECONDS:
            return 400, {"error": "invalid_grant", "error_description": "unknown code"}
        if grant.client_id != client_id or grant.redirect_uri != form.get("redirect_uri"):
            return 400, {"error": "invalid_grant", "error_description": "not this client's"}
        verifier = form.get("code_verifier")
        if not verifier or not hmac.compare_digest(s256(verifier), grant.challenge):
            return 400, {"error": "invalid_grant", "error_description": "PKCE verifier"}
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "aud": client_id,
            "iat": now,
            "exp": now + 300,
            **({"nonce": grant.nonce} if grant.nonce is not None else {}),
            **grant.claims,
            **self.id_token_overrides,
        }
        key = self.stranger if self.sign_with_unknown_key else self.key
        id_token = jwt.encode({"alg": "RS256", "kid": "idp-1"}, claims, key)
        return 200, {
            "access_token": secrets.token_urlsafe(24),
            "token_type": "Bearer",
            "expires_in": 300,
            "id_token": id_token,
        }


def _app(provider: Provider) -> Litestar:
    @get("/.well-known/openid-configuration")
    async def discovery() -> dict[str, Any]:
        return provider.discovery()

    @get("/jwks")
    async def jwks() -> dict[str, Any]:
        return {"keys": [provider.key.as_dict(private=False, use="sig", alg="RS256")]}

    @get("/authorize")
    async def authorize(request: Request[Any, Any, Any]) -> Response[Any]:
        status, where = provider.authorize(dict(request.query_params))
        if status != 302:
            return Response({"error": where}, status_code=status)
        return Redirect(where, status_code=302)

    @post("/token")
    async def token(request: Request[Any, Any, Any]) -> Response[Any]:
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        status, body = provider.token(form, request.headers.get("authorization"))
        return Response(body, status_code=status, headers={"Cache-Control": "no-store"})

    return Litestar(route_handlers=[discovery, jwks, authorize, token])


@asynccontextmanager
async def oidc_provider(clients: dict[str, str | None]) -> AsyncIterator[Provider]:
    """A provider served on 127.0.0.1 for the ``async with`` block."""
    provider = Provider(clients=clients)
    async with serving(_app(provider)) as url:
        provider.issuer = url
        yield provider
