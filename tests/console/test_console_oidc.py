"""Console sign-in through a real OIDC provider (tests/support/oidc_provider.py) over
HTTP: the authorization code flow with PKCE S256, state and nonce kept server-side,
the ID token verified, the principal mapped as bearer tokens map it; and each attack
refused: a mismatched or replayed state, a lost verifier, a code redeemed without its
verifier, a wrong nonce, audience or issuer, an expired or foreign-signed ID token,
a member, and the provider's own refusal."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from gateway.app import create_app
from gateway.settings import ConsoleSettings, Settings
from tests.conftest import ADMIN_KEY
from tests.gateway.test_workload_api import CONFIG, bearer
from tests.support.oidc_provider import Provider, oidc_provider, s256
from tests.support.serve import serving

CLIENT = "ignara-console"
LEAD = {"sub": "ada", "tenant": "alpha", "roles": ["member", "tenant-admin"]}


@dataclass
class Setup:
    idp: Provider
    url: str


def oidc_settings(settings: Settings, idp: Provider) -> Settings:
    return replace(
        settings,
        auth=replace(
            settings.auth,
            oidc_issuer=idp.issuer,
            oidc_audience="ignara-api",
            oidc_jwks_uri=idp.jwks_uri,
        ),
        console=ConsoleSettings(oidc_client_id=CLIENT, oidc_provider_name="TestIdP"),
    )


@pytest.fixture
async def setup(settings: Settings) -> AsyncIterator[Setup]:
    async with oidc_provider({CLIENT: None}) as idp:
        idp.user = dict(LEAD)
        async with serving(create_app(oidc_settings(settings, idp))) as url:
            async with httpx.AsyncClient(base_url=url) as admin:
                answer = await admin.post(
                    "/api/v1/admin/config", json=CONFIG, headers=bearer(ADMIN_KEY)
                )
                assert answer.status_code == 201, answer.text
            yield Setup(idp, url)


def browser(url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, follow_redirects=False, timeout=20)


async def to_provider(client: httpx.AsyncClient) -> dict[str, str]:
    """Start a sign-in: the authorization request's parameters."""
    login = await client.get("/console/login")
    assert "Sign in with TestIdP" in login.text
    start = await client.get("/console/oidc/login")
    assert start.status_code == 303, start.text
    where = start.headers["location"]
    query = {k: v[0] for k, v in parse_qs(urlsplit(where).query).items()}
    query["_url"] = where
    return query


async def back_from_provider(client: httpx.AsyncClient, query: dict[str, str]) -> str:
    """The provider's redirect back (its callback URL, code and state)."""
    answer = await client.get(query["_url"])
    assert answer.status_code == 302, answer.text
    return answer.headers["location"]


async def sign_in(client: httpx.AsyncClient) -> httpx.Response:
    query = await to_provider(client)
    return await client.get(await back_from_provider(client, query))


async def test_a_tenant_admin_signs_in_with_pkce_state_and_nonce(setup: Setup) -> None:
    async with browser(setup.url) as client:
        query = await to_provider(client)
        assert query["response_type"] == "code" and query["client_id"] == CLIENT
        assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43
        assert query["state"] and query["nonce"] and "openid" in query["scope"].split()
        assert query["redirect_uri"] == f"{setup.url}/console/oidc/callback"
        assert "code_verifier" not in query["_url"]
        oidc_cookie = client.cookies.get("ignara_console_oidc")
        assert oidc_cookie and oidc_cookie not in query["_url"]
        callback = await client.get(await back_from_provider(client, query))
        assert callback.status_code == 200 and 'data-testid="oidc-signed-in"' in callback.text
        assert 'http-equiv="refresh"' in callback.text
        # The verifier was sent to the token endpoint only, and matches the challenge.
        sent = setup.idp.token_requests[-1]
        assert s256(sent["code_verifier"]) == query["code_challenge"]
        assert "samesite=strict" in callback.headers["set-cookie"].lower()
        dashboard = await client.get("/console/dashboard")
        assert dashboard.status_code == 200 and "tenant admin of alpha" in dashboard.text
        assert "ada" in dashboard.text
        # The session acts as that principal, within its tenant only.
        assert (await client.get("/console/tenants/alpha")).status_code == 200
        assert (await client.get("/console/tenants/beta")).status_code == 403


async def test_a_mismatched_state_is_refused_and_spends_the_sign_in(setup: Setup) -> None:
    async with browser(setup.url) as client:
        query = await to_provider(client)
        back = await back_from_provider(client, query)
        forged = back.replace(f"state={query['state']}", "state=forged-state")
        refused = await client.get(forged)
        assert refused.status_code == 400 and "state does not match" in refused.text
        again = await client.get(back)  # the real state, too late: the sign-in is spent
        assert again.status_code == 400
        assert (await client.get("/console/dashboard")).status_code == 303


async def test_a_replayed_state_is_refused(setup: Setup) -> None:
    async with browser(setup.url) as client:
        query = await to_provider(client)
        pending = client.cookies.get("ignara_console_oidc")
        back = await back_from_provider(client, query)
        assert (await client.get(back)).status_code == 200
    async with browser(setup.url) as replayer:  # the same callback, its cookie included
        replayed = await replayer.get(back, headers={"Cookie": f"ignara_console_oidc={pending}"})
        assert replayed.status_code == 400 and "already used" in replayed.text
        assert "ignara_console=" not in replayed.headers.get("set-cookie", "")


async def test_a_callback_without_its_pending_sign_in_is_refused(setup: Setup) -> None:
    async with browser(setup.url) as victim:
        query = await to_provider(victim)
        back = await back_from_provider(victim, query)
    async with browser(setup.url) as attacker:  # has the code and state, not the verifier
        refused = await attacker.get(back)
        assert refused.status_code == 400 and 'data-testid="login-error"' in refused.text


async def test_a_stolen_code_is_worthless_without_its_verifier(setup: Setup) -> None:
    async with browser(setup.url) as client:
        query = await to_provider(client)
        back = await back_from_provider(client, query)
        code = parse_qs(urlsplit(back).query)["code"][0]
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "client_id": CLIENT,
            "redirect_uri": query["redirect_uri"],
        }
        token_url = f"{setup.idp.issuer}/token"
        without = await client.post(token_url, data=form)
        assert without.status_code == 400 and without.json()["error"] == "invalid_grant"
        # The code is spent by that try, and the gateway's own redemption fails too.
        refused = await client.get(back)
        assert refused.status_code == 401 and "invalid_grant" in refused.text
    async with browser(setup.url) as client:
        query = await to_provider(client)
        back = await back_from_provider(client, query)
        code = parse_qs(urlsplit(back).query)["code"][0]
        wrong = await client.post(
            f"{setup.idp.issuer}/token", data={**form, "code": code, "code_verifier": "x" * 60}
        )
        assert wrong.status_code == 400


@pytest.mark.parametrize(
    ("tamper", "says"),
    [
        ({"nonce": "another-sign-in"}, "nonce"),
        ({"aud": "someone-else"}, "not meant for this gateway"),
        ({"iss": "https://evil.example"}, "issuer this gateway does not trust"),
        ({"exp": 1_000_000_000}, "expired"),
    ],
)
async def test_a_tampered_id_token_is_refused(
    setup: Setup, tamper: dict[str, Any], says: str
) -> None:
    setup.idp.id_token_overrides = tamper
    async with browser(setup.url) as client:
        refused = await sign_in(client)
        assert refused.status_code == 401, refused.text
        assert says in refused.text.lower()
        assert (await client.get("/console/dashboard")).status_code == 303


async def test_an_id_token_signed_with_another_key_is_refused(setup: Setup) -> None:
    setup.idp.sign_with_unknown_key = True
    async with browser(setup.url) as client:
        refused = await sign_in(client)
        assert refused.status_code == 401 and "signature" in refused.text


@pytest.mark.parametrize(
    "user",
    [
        {"sub": "bob", "tenant": "alpha", "roles": ["member"]},
        # An admin role in a tenant's token grants nothing, as for bearer tokens.
        {"sub": "mallory", "tenant": "alpha", "roles": ["admin"]},
    ],
)
async def test_who_is_not_an_admin_gets_a_clear_403(setup: Setup, user: dict[str, Any]) -> None:
    setup.idp.user = user
    async with browser(setup.url) as client:
        refused = await sign_in(client)
        assert refused.status_code == 403 and "admins only" in refused.text
        assert (await client.get("/console/dashboard")).status_code == 303


async def test_the_providers_refusal_is_shown(setup: Setup) -> None:
    async with browser(setup.url) as client:
        query = await to_provider(client)
        callback = f"{query['redirect_uri']}?error=access_denied&state={query['state']}"
        refused = await client.get(callback)
        assert refused.status_code == 401 and "access_denied" in refused.text


async def test_without_oidc_there_is_no_button_and_no_flow(settings: Settings) -> None:
    async with serving(create_app(settings)) as url, browser(url) as client:
        assert "Sign in with" not in (await client.get("/console/login")).text
        assert (await client.get("/console/oidc/login")).status_code == 404
        assert (await client.get("/console/oidc/callback?code=x&state=y")).status_code == 404
