"""What the inference calls' own ASGI app (gateway/inference/routes.py) answers around
the service, over real HTTP: methods, body limits, credentials and unexpected errors,
each as a JSON error, and nothing forwarded upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway.inference.routes import MAX_BODY_BYTES
from gateway.settings import Settings
from tests.inference.test_v1_api import CHAT, Gateway, running_gateway
from tests.support.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration


@pytest.fixture
async def gateway(settings: Settings) -> AsyncIterator[Gateway]:
    async with (
        FakeOpenAI(models=("fake-model", "fake-embed"), completion_tokens=5) as upstream,
        running_gateway(settings, upstream, None) as gateway,
    ):
        yield gateway


@pytest.fixture
async def http(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
        yield client


def _auth(gateway: Gateway) -> dict[str, str]:
    return {"Authorization": f"Bearer {gateway.keys['alpha']}"}


async def test_a_call_with_a_trailing_slash_is_the_same_call(
    gateway: Gateway, http: httpx.AsyncClient
) -> None:
    body = {"model": "fake-model", "messages": CHAT, "max_tokens": 8}
    response = await http.post("/v1/chat/completions/", json=body, headers=_auth(gateway))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert int(response.headers["content-length"]) == len(response.content)
    assert response.json()["choices"][0]["message"]["content"]
    assert response.headers["x-ratelimit-limit-tokens"] == "10000"


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
async def test_only_post_is_allowed(gateway: Gateway, http: httpx.AsyncClient, method: str) -> None:
    response = await http.request(method, "/v1/completions", headers=_auth(gateway))
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.json()["error"]["code"] == "method_not_allowed"


async def test_without_credentials_the_answer_is_a_401_challenge(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/embeddings", json={"model": "fake-embed", "input": "x"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="ignara"'
    assert response.json()["error"]["code"] == "missing_credentials"


async def test_several_authorization_headers_are_refused(
    gateway: Gateway, http: httpx.AsyncClient
) -> None:
    key = gateway.keys["alpha"]
    response = await http.post(
        "/v1/chat/completions",
        json={"model": "fake-model", "messages": CHAT},
        headers=[("Authorization", f"Bearer {key}"), ("Authorization", f"Bearer {key}")],
    )
    assert response.status_code == 401
    assert "not several" in response.json()["error"]["message"]
    assert gateway.upstream.total_requests == 0


async def _chunks(total: int, size: int = 1 << 20) -> AsyncIterator[bytes]:
    while total > 0:
        yield b" " * min(size, total)
        total -= size


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_a_body_over_the_limit_is_413(
    gateway: Gateway, http: httpx.AsyncClient, declared: bool
) -> None:
    size = MAX_BODY_BYTES + 1
    content: Any = b" " * size if declared else _chunks(size)
    response = await http.post("/v1/chat/completions", content=content, headers=_auth(gateway))
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "request_too_large" and str(MAX_BODY_BYTES) in error["message"]
    assert gateway.upstream.total_requests == 0


async def test_an_unexpected_error_is_a_json_500(
    gateway: Gateway, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(gateway.services.inference, "handle", broken)
    response = await http.post(
        "/v1/chat/completions",
        json={"model": "fake-model", "messages": CHAT},
        headers=_auth(gateway),
    )
    assert response.status_code == 500
    error = response.json()["error"]
    assert (error["code"], error["message"]) == ("internal_error", "internal error")


async def test_the_model_list_is_still_litestars(gateway: Gateway, http: httpx.AsyncClient) -> None:
    """Only the calls moved: ``GET /v1/models`` keeps its route, its middleware and its
    place in the OpenAPI schema."""
    response = await http.get("/v1/models", headers=_auth(gateway))
    assert response.status_code == 200
    assert {m["id"] for m in response.json()["data"]} == {"fake-model", "fake-embed"}
    schema = (await http.get("/schema/openapi.json")).json()
    assert "/v1/models" in schema["paths"]
