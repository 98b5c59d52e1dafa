"""The model registry through the admin API: list with health, put, delete; the
/v1 routes follow at once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.settings import Settings
from tests.conftest import ADMIN_KEY
from tests.inference.test_v1_api import CHAT, Gateway, running_gateway
from tests.support.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture
async def gateway(settings: Settings, upstream: FakeOpenAI) -> AsyncIterator[Gateway]:
    async with running_gateway(settings, upstream, None) as gateway:
        yield gateway


@pytest.fixture
async def upstream() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(models=("fake-model",)) as fake:
        yield fake


async def test_models_are_listed_with_their_health(gateway: Gateway) -> None:
    await gateway.services.health.check_once()
    async with httpx.AsyncClient(base_url=gateway.url, headers=ADMIN) as http:
        listed = (await http.get("/api/v1/admin/models")).json()
    by_name = {m["name"]: m for m in listed}
    assert by_name["fake-model"]["flavor"] == "llama"
    assert by_name["fake-model"]["served"] is True
    assert by_name["fake-model"]["endpoints"][0]["healthy"] is True


async def test_a_model_put_through_the_api_is_served_and_a_deleted_one_is_gone(
    gateway: Gateway,
) -> None:
    client = gateway.client("alpha")
    body = {"flavor": "llama", "endpoints": [{"base_url": gateway.upstream.base_url}]}
    async with httpx.AsyncClient(base_url=gateway.url, headers=ADMIN) as http:
        put = await http.put("/api/v1/admin/models/org/new-model", json=body)
        assert put.status_code == 201, put.text
        answer = await client.chat.completions.create(model="org/new-model", messages=CHAT)
        assert answer.choices[0].message.content
        gone = await http.delete("/api/v1/admin/models/org/new-model")
        assert gone.status_code == 200
        missing = await http.delete("/api/v1/admin/models/org/new-model")
        assert missing.status_code == 404
        audit = (await http.get("/api/v1/admin/config")).json()
    assert all(m["name"] != "org/new-model" for m in audit["models"])
    models = [m.id async for m in client.models.list()]
    assert "org/new-model" not in models


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/api/v1/admin/models/x", {"flavor": "nope", "endpoints": []}, 422),
        (
            "/api/v1/admin/models/x",
            {"flavor": "llama", "endpoints": [{"base_url": "ftp://h"}]},
            422,
        ),
        ("/api/v1/admin/models/x", {"flavor": "llama"}, 400),
        ("/api/v1/admin/models/-bad", {"flavor": "llama", "endpoints": []}, 400),
    ],
)
async def test_bad_models_are_refused_and_nothing_changes(
    gateway: Gateway, path: str, body: dict[str, object], status: int
) -> None:
    async with httpx.AsyncClient(base_url=gateway.url, headers=ADMIN) as http:
        before = (await http.get("/api/v1/admin/config")).json()
        answer = await http.put(path, json=body)
        after = (await http.get("/api/v1/admin/config")).json()
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["message"]
    assert before == after


async def test_a_member_may_not_change_the_registry(gateway: Gateway) -> None:
    member = {"Authorization": f"Bearer {gateway.keys['alpha']}"}
    body = {"flavor": "llama", "endpoints": [{"base_url": gateway.upstream.base_url}]}
    async with httpx.AsyncClient(base_url=gateway.url, headers=member) as http:
        assert (await http.put("/api/v1/admin/models/mine", json=body)).status_code == 403
        assert (await http.get("/api/v1/admin/models")).status_code == 403


@pytest.mark.parametrize("variable", ["IGNARA_ADMIN_KEY", "DATABASE_URL", "PATH", "HOME"])
async def test_an_endpoint_may_not_send_the_gateways_own_variables_upstream(
    gateway: Gateway, variable: str
) -> None:
    """A careless (or hostile) admin points an endpoint's key at a variable of the
    gateway: refused with 422 naming the rule, by both admin routes, and nothing changes."""
    endpoint = {"base_url": gateway.upstream.base_url, "api_key_env": variable}
    async with httpx.AsyncClient(base_url=gateway.url, headers=ADMIN) as http:
        before = (await http.get("/api/v1/admin/config")).json()
        put = await http.put(
            "/api/v1/admin/models/leak", json={"flavor": "llama", "endpoints": [endpoint]}
        )
        leak = {"name": "leak", "flavor": "llama", "endpoints": [endpoint]}
        whole = {**before, "models": [*before["models"], leak]}
        applied = await http.post("/api/v1/admin/config", json=whole)
        after = (await http.get("/api/v1/admin/config")).json()
    for refused in (put, applied):
        assert refused.status_code == 422, refused.text
        message = refused.json()["error"]["message"]
        assert f"api_key_env: {variable!r} may not be sent upstream" in message
        assert "must start with IGNARA_UPSTREAM_KEY_" in message
    assert after == before
