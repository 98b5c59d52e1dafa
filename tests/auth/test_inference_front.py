"""Authentication on the inference calls' own ASGI front (gateway/inference/routes.py),
which runs outside Litestar's exception handlers: whatever goes wrong while a caller
is authenticated is answered in JSON, never uvicorn's plain-text 500."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway.settings import Settings
from tenants import Database
from tests.inference.test_v1_api import CHAT, Gateway, running_gateway
from tests.support.fake_openai import FakeOpenAI
from tests.support.gateways import free_port

pytestmark = pytest.mark.integration


@pytest.fixture
async def gateway(settings: Settings) -> AsyncIterator[Gateway]:
    async with (
        FakeOpenAI(models=("fake-model",), completion_tokens=5) as upstream,
        running_gateway(settings, upstream, None) as gateway,
    ):
        yield gateway


async def _call(gateway: Gateway) -> httpx.Response:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as http:
        return await http.post(
            "/v1/chat/completions",
            json={"model": "fake-model", "messages": CHAT},
            headers={"Authorization": f"Bearer {gateway.keys['alpha']}"},
        )


async def test_a_bug_while_authenticating_is_a_json_500_in_openais_shape(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(gateway.services.api_keys, "get", broken)
    response = await _call(gateway)
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "error": {
            "message": "internal error",
            "type": "api_error",
            "param": None,
            "code": "internal_error",
        }
    }
    assert "a bug" not in response.text


async def test_a_database_out_of_reach_past_authentication_is_a_json_503(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing on the call's path reads the database today; if something ever does,
    its outage is a 503 naming the database, as on every other route."""
    gone = Database(f"postgresql://postgres@127.0.0.1:{free_port()}/ignara")

    async def reads_the_database(*_: Any) -> None:
        await gone.ping()

    monkeypatch.setattr(gateway.services.inference, "handle", reads_the_database)
    try:
        response = await _call(gateway)
    finally:
        await gone.dispose()
    assert response.status_code == 503
    assert response.headers["retry-after"].isdigit()
    error = response.json()["error"]
    assert (error["code"], error["type"]) == ("database_unavailable", "api_error")
