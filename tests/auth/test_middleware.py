"""The middleware in a small Litestar app: 401 JSON for bad credentials, the identity for good."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from litestar import Litestar, Request, get
from litestar.testing import AsyncTestClient

from gateway.auth import (
    Authenticator,
    Identity,
    InMemoryApiKeyStore,
    JwksCache,
    OidcSettings,
    OidcVerifier,
    StoredKey,
    auth_middleware,
    generate_api_key,
    hash_secret,
    parse_api_key,
)
from tests.auth.conftest import AUDIENCE, ISSUER, FakeClock, JwksServer, SigningKeys, sign

PEPPER = b"pepper-for-tests-0123456789"
ADMIN_KEY = "bootstrap-admin-key-0123456789"


@get("/whoami")
async def whoami(request: Request[Identity, Any, Any]) -> dict[str, Any]:
    user = request.user
    return {
        "tenant": user.tenant,
        "principal": user.principal,
        "roles": sorted(user.roles),
        "via": user.via,
        "auth": request.auth,
    }


@get("/public", opt={"exclude_from_auth": True})
async def public() -> dict[str, str]:
    return {"open": "yes"}


@get(["/healthz", "/readyz"])
async def probe() -> dict[str, str]:
    """Stands in for the gateway's probes: open by path, not by an opt-out."""
    return {"status": "ok"}


@pytest.fixture
def api_key() -> tuple[str, InMemoryApiKeyStore]:
    key = generate_api_key("live")
    store = InMemoryApiKeyStore(
        [
            StoredKey(
                key.key_id,
                "acme",
                "ci-bot",
                secret_hash=hash_secret(key.secret, PEPPER),
                roles=frozenset({"member"}),
            )
        ]
    )
    return key.token, store


@pytest.fixture
async def client(
    api_key: tuple[str, InMemoryApiKeyStore], jwks_server: JwksServer, clock: FakeClock
) -> AsyncIterator[AsyncTestClient[Litestar]]:
    settings = OidcSettings(
        issuer=ISSUER, audience=AUDIENCE, jwks_uri=jwks_server.url, jwks_timeout_seconds=5.0
    )
    verifier = OidcVerifier(settings, jwks=JwksCache.from_settings(settings, clock=clock))
    authenticator = Authenticator(
        api_keys=api_key[1], pepper=PEPPER, oidc=verifier, bootstrap_key=ADMIN_KEY
    )
    app = Litestar(
        route_handlers=[whoami, public, probe],
        middleware=[auth_middleware(authenticator)],
        on_shutdown=[authenticator.aclose],
    )
    async with AsyncTestClient(app=app, timeout=5) as test_client:
        yield test_client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_missing_credentials_get_a_401_json_challenge(
    client: AsyncTestClient[Litestar],
) -> None:
    response = await client.get("/whoami")
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/json"
    assert response.headers["www-authenticate"] == 'Bearer realm="ignara"'
    assert response.headers["cache-control"] == "no-store"
    assert response.json()["error"]["code"] == "missing_credentials"
    assert response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        pytest.param(bearer(generate_api_key("live").token), "invalid_api_key", id="unknown key"),
        pytest.param(bearer("ign_live_garbage"), "invalid_api_key", id="malformed key"),
        pytest.param({"Authorization": f"Basic {ADMIN_KEY}"}, "invalid_credentials", id="basic"),
        pytest.param(bearer("opaque"), "invalid_credentials", id="opaque token"),
        pytest.param(bearer("x" * 17_000), "token_too_large", id="huge"),
        pytest.param(bearer("eyJ.eyJ.sig"), "invalid_token", id="malformed jwt"),
    ],
)
async def test_bad_credentials_get_a_401_with_a_stable_code(
    client: AsyncTestClient[Litestar], headers: dict[str, str], code: str
) -> None:
    response = await client.get("/whoami", headers=headers)
    assert response.status_code == 401
    assert response.json() == {
        "error": {
            "code": code,
            "message": response.json()["error"]["message"],
            "type": "authentication_error",
        }
    }
    assert response.headers["www-authenticate"] == 'Bearer realm="ignara", error="invalid_token"'
    token = headers["Authorization"].split(" ", 1)[1]
    assert token not in response.text


async def test_a_wrong_secret_is_not_echoed(
    client: AsyncTestClient[Litestar], api_key: tuple[str, InMemoryApiKeyStore]
) -> None:
    token = api_key[0][:-4] + "AAAA"
    response = await client.get("/whoami", headers=bearer(token))
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert parse_api_key(token).secret not in response.text  # type: ignore[union-attr]


async def test_a_valid_api_key_reaches_the_handler_with_its_identity(
    client: AsyncTestClient[Litestar], api_key: tuple[str, InMemoryApiKeyStore]
) -> None:
    response = await client.get("/whoami", headers=bearer(api_key[0]))
    assert response.status_code == 200
    assert response.json() == {
        "tenant": "acme",
        "principal": "ci-bot",
        "roles": ["member"],
        "via": "api-key",
        "auth": "api-key",
    }


async def test_the_bootstrap_key_reaches_the_handler_as_admin(
    client: AsyncTestClient[Litestar],
) -> None:
    response = await client.get("/whoami", headers=bearer(ADMIN_KEY))
    assert response.status_code == 200
    assert response.json()["roles"] == ["admin"]
    assert response.json()["via"] == "bootstrap"


async def test_an_oidc_token_reaches_the_handler(
    client: AsyncTestClient[Litestar], keys: SigningKeys
) -> None:
    response = await client.get("/whoami", headers=bearer(sign(keys.ec)))
    assert response.status_code == 200
    assert response.json()["via"] == "oidc"
    forged = await client.get("/whoami", headers=bearer(sign(keys.attacker)))
    assert (forged.status_code, forged.json()["error"]["code"]) == (401, "invalid_token")


async def test_an_unreachable_issuer_is_a_503_without_challenge(
    client: AsyncTestClient[Litestar], jwks_server: JwksServer, keys: SigningKeys
) -> None:
    jwks_server.mode = "error"
    response = await client.get("/whoami", headers=bearer(sign(keys.rsa)))
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "jwks_unavailable"
    assert "www-authenticate" not in response.headers
    assert response.headers["retry-after"] == "30"  # when the issuer is asked again


async def test_several_authorization_headers_are_refused(
    client: AsyncTestClient[Litestar], api_key: tuple[str, InMemoryApiKeyStore]
) -> None:
    headers = [("Authorization", f"Bearer {api_key[0]}"), ("Authorization", f"Bearer {ADMIN_KEY}")]
    response = await client.get("/whoami", headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_credentials"


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/schema/openapi.json", "/public"])
async def test_probes_schema_and_opted_out_routes_are_open(
    client: AsyncTestClient[Litestar], path: str
) -> None:
    assert (await client.get(path)).status_code == 200


async def test_a_path_merely_starting_like_an_open_one_is_not_open(
    client: AsyncTestClient[Litestar],
) -> None:
    assert (await client.get("/healthz-but-not-really")).status_code == 404  # no such route
    assert (await client.get("/whoami", params={"x": "/healthz"})).status_code == 401
