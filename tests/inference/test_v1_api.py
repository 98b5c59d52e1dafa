"""The OpenAI-compatible routes end to end: the official ``openai`` client against the
gateway (served over real HTTP) in front of a local OpenAI-compatible upstream."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import openai
import pytest

from gateway.app import create_app
from gateway.auth import Identity
from gateway.inference.calls import CallKind
from gateway.services import Services
from gateway.settings import InferenceSettings, Settings
from tests.conftest import ADMIN_KEY
from tests.support.fake_openai import FakeOpenAI
from tests.support.serve import serving

pytestmark = pytest.mark.integration


def token_queue(name: str, tokens: int, requests: int = 1000) -> dict[str, Any]:
    return {
        "name": name,
        "cohort": "org",
        "resource_groups": [
            {
                "resources": ["tokens-per-minute", "requests-per-minute"],
                "flavors": [
                    {
                        "name": "llama",
                        "quotas": {
                            "tokens-per-minute": {"nominal": tokens, "borrowing_limit": 0},
                            "requests-per-minute": {"nominal": requests, "borrowing_limit": 0},
                        },
                    }
                ],
            }
        ],
    }


def budget_queue(name: str, tokens_per_day: int) -> dict[str, Any]:
    return {
        "name": name,
        "cohort": "org",
        "resource_groups": [
            {
                "resources": ["tokens-per-day"],
                "flavors": [
                    {
                        "name": "llama",
                        "quotas": {
                            "tokens-per-day": {"nominal": tokens_per_day, "borrowing_limit": 0}
                        },
                    }
                ],
            }
        ],
    }


def config(upstream: str) -> dict[str, Any]:
    return {
        "flavors": ["llama", "mini"],
        "cohorts": [{"name": "org"}],
        "cluster_queues": [
            token_queue("team-a", 10_000),
            token_queue("team-b", 10_000),
            token_queue("team-tight", 60, requests=2),
            token_queue("team-wait", 100),
            budget_queue("team-budget", 1000),
        ],
        "tenants": [
            {"name": "alpha", "queues": ["team-a"]},
            {"name": "beta", "queues": ["team-b"], "models": ["fake-model"]},
            {"name": "tight", "queues": ["team-tight"]},
            {"name": "waiter", "queues": ["team-wait"]},
            {"name": "saver", "queues": ["team-budget"]},
        ],
        "models": [
            {"name": "fake-model", "flavor": "llama", "endpoints": [{"base_url": upstream}]},
            {"name": "fake-embed", "flavor": "llama", "endpoints": [{"base_url": upstream}]},
            {"name": "mini-model", "flavor": "mini", "endpoints": [{"base_url": upstream}]},
        ],
        "inference": {
            "default_max_tokens": 16,
            "max_call_tokens": 8000,
            "waiting": [{"queue": "team-wait", "max_wait_seconds": 5}],
        },
    }


@dataclasses.dataclass
class Gateway:
    url: str
    services: Services
    keys: dict[str, str]
    upstream: FakeOpenAI
    clients: list[openai.AsyncOpenAI] = dataclasses.field(default_factory=list)

    def client(self, tenant: str, **kw: Any) -> openai.AsyncOpenAI:
        client = openai.AsyncOpenAI(
            api_key=self.keys.get(tenant, tenant), base_url=f"{self.url}/v1", max_retries=0, **kw
        )
        self.clients.append(client)
        return client

    async def settled(self) -> None:
        """Wait for the accounting the gateway does after answering."""
        await self.services.inference.drain()

    async def usage(self, queue: str, resource: str = "tokens-per-minute") -> int:
        await self.settled()
        ledger = self.services.inference.ledger
        return await ledger.usage(queue, "llama", resource)


@pytest.fixture
async def upstream() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(models=("fake-model", "fake-embed"), completion_tokens=5) as fake:
        yield fake


# The test gateway's first-byte timeout. A call on a loaded 2-core machine (the tests
# share it with the servers they start) may take over a second to reach the fake
# upstream and back; tests that want a 504 make the upstream wait twice this.
FIRST_BYTE_TIMEOUT = 3.0


@asynccontextmanager
async def running_gateway(
    settings: Settings, upstream: FakeOpenAI, redis_url: str | None
) -> AsyncIterator[Gateway]:
    """A gateway over real HTTP with the test config applied and a key per tenant."""
    settings = dataclasses.replace(
        settings,
        inference=InferenceSettings(
            redis_url=redis_url,
            ledger_prefix=f"test-{uuid.uuid4().hex}",
            first_byte_timeout=FIRST_BYTE_TIMEOUT,
            total_timeout=5.0,
            health_interval=3600,
        ),
    )
    app = create_app(settings)
    services: Services = app.state["services"]
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        applied = await http.post(
            "/api/v1/admin/config", json=config(upstream.base_url), headers=admin
        )
        assert applied.status_code == 201, applied.text
        await services.reload_config()
        keys = {}
        for tenant in ("alpha", "beta", "tight", "waiter", "saver"):
            made = await http.post(
                f"/api/v1/admin/tenants/{tenant}/keys",
                json={"principal": f"{tenant}-bot", "roles": ["member"]},
                headers=admin,
            )
            assert made.status_code == 201, made.text
            keys[tenant] = made.json()["token"]
        keys["admin"] = ADMIN_KEY
        gateway = Gateway(url, services, keys, upstream)
        try:
            yield gateway
        finally:
            for client in gateway.clients:
                await client.close()


@pytest.fixture(params=["memory", "redis"])
async def gateway(
    request: pytest.FixtureRequest, settings: Settings, upstream: FakeOpenAI
) -> AsyncIterator[Gateway]:
    """The gateway with its in-process ledger, and with one in a real Redis."""
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    async with running_gateway(settings, upstream, redis_url) as gateway:
        yield gateway


CHAT = [{"role": "user", "content": "say three words"}]


async def test_chat_completion_is_forwarded_and_charged_its_real_usage(gateway: Gateway) -> None:
    client = gateway.client("alpha")
    raw = await client.chat.completions.with_raw_response.create(
        model="fake-model", messages=CHAT, max_tokens=50
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "tok0 tok1 tok2 tok3 tok4"
    assert completion.usage is not None and completion.usage.total_tokens == 3 + 5
    # Reserved 50 + the estimate of the prompt, reconciled to what the upstream counted.
    assert await gateway.usage("team-a") == 8
    assert await gateway.usage("team-a", "requests-per-minute") == 1
    assert raw.headers["x-ratelimit-limit-tokens"] == "10000"
    assert raw.headers["x-ratelimit-limit-requests"] == "1000"
    assert int(raw.headers["x-ratelimit-remaining-requests"]) == 999
    assert int(raw.headers["x-ratelimit-remaining-tokens"]) < 10_000
    assert raw.headers["x-ratelimit-reset-tokens"].endswith("s")
    assert gateway.upstream.auth_headers[-1] is None  # the caller's key never goes upstream


async def test_streaming_passes_chunks_and_strips_the_usage_chunk_it_asked_for(
    gateway: Gateway,
) -> None:
    client = gateway.client("alpha")
    stream = await client.chat.completions.create(
        model="fake-model", messages=CHAT, max_tokens=50, stream=True
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "tok0 tok1 tok2 tok3 tok4 "
    assert all(c.usage is None for c in chunks)  # the client did not ask for usage
    assert await gateway.usage("team-a") == 8  # the upstream's usage chunk was read


async def test_streaming_keeps_the_usage_chunk_when_the_client_asks(gateway: Gateway) -> None:
    client = gateway.client("alpha")
    stream = await client.chat.completions.create(
        model="fake-model",
        messages=CHAT,
        max_tokens=50,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5


async def test_completions_and_embeddings(gateway: Gateway) -> None:
    client = gateway.client("alpha")
    completion = await client.completions.create(model="fake-model", prompt="one two", max_tokens=3)
    assert completion.choices[0].text == "tok0 tok1 tok2"
    stream = await client.completions.create(
        model="fake-model", prompt="one two", max_tokens=2, stream=True
    )
    assert "".join([c.choices[0].text async for c in stream if c.choices]) == "tok0 tok1 "
    embedding = await client.embeddings.create(model="fake-embed", input=["a b", "c"])
    assert len(embedding.data) == 2 and embedding.usage.prompt_tokens == 3
    assert await gateway.usage("team-a") == (2 + 3) + (2 + 2) + 3


async def test_models_lists_what_the_tenant_may_call(gateway: Gateway) -> None:
    alpha = [m.id async for m in gateway.client("alpha").models.list()]
    beta = [m.id async for m in gateway.client("beta").models.list()]
    assert alpha == ["fake-embed", "fake-model"]  # mini-model's flavor is not its queue's
    assert beta == ["fake-model"]  # its allow-list


@pytest.mark.parametrize(
    ("tenant", "model"),
    [("alpha", "no-such-model"), ("alpha", "mini-model"), ("beta", "fake-embed")],
    ids=["unknown", "flavor-not-open", "not-on-allow-list"],
)
async def test_a_model_out_of_reach_is_not_found(gateway: Gateway, tenant: str, model: str) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await gateway.client(tenant).chat.completions.create(model=model, messages=CHAT)
    assert caught.value.code == "model_not_found"
    assert gateway.upstream.total_requests == 0


@pytest.mark.parametrize(
    "body",
    [
        {"model": "fake-model"},
        {"model": "fake-model", "messages": []},
        {"model": "fake-model", "messages": CHAT, "max_tokens": -1},
        {"model": "fake-model", "messages": CHAT, "max_tokens": True},
        {"model": "fake-model", "messages": CHAT, "stream": "yes"},
        {"model": 7, "messages": CHAT},
        {"messages": CHAT},
        ["not", "an", "object"],
    ],
)
async def test_bad_bodies_are_400_in_openai_shape(gateway: Gateway, body: Any) -> None:
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        response = await http.post(
            "/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {gateway.keys['alpha']}"},
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    assert gateway.upstream.total_requests == 0
    assert await gateway.usage("team-a") == 0


async def test_not_json_is_400(gateway: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        response = await http.post(
            "/v1/chat/completions",
            content=b"{not json",
            headers={"Authorization": f"Bearer {gateway.keys['alpha']}"},
        )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "the body is not valid JSON"


async def test_callers_without_a_key_or_a_tenant_are_refused(gateway: Gateway) -> None:
    client = openai.AsyncOpenAI(
        api_key="ign_live_bogus", base_url=f"{gateway.url}/v1", max_retries=0
    )
    with pytest.raises(openai.AuthenticationError):
        await client.chat.completions.create(model="fake-model", messages=CHAT)
    with pytest.raises(openai.PermissionDeniedError):  # an admin spends no tenant's quota
        await gateway.client("admin").chat.completions.create(model="fake-model", messages=CHAT)


async def test_another_tenants_queue_is_refused(gateway: Gateway) -> None:
    client = gateway.client("alpha", default_headers={"X-Ignara-Queue": "team-b"})
    with pytest.raises(openai.PermissionDeniedError) as caught:
        await client.chat.completions.create(model="fake-model", messages=CHAT)
    assert "team-b" in caught.value.message
    assert await gateway.usage("team-b") == 0


async def test_queue_names_a_caller_makes_up_are_refused_and_not_remembered(
    gateway: Gateway,
) -> None:
    """X-Ignara-Queue is the caller's to choose: refusals of names no tenant has must
    not pile up in the gateway's memory of decisions, however many it sends."""
    catalog = gateway.services.inference.catalog
    before = len(catalog.decisions)
    for i in range(20):
        client = gateway.client("alpha", default_headers={"X-Ignara-Queue": f"made-up-{i}"})
        with pytest.raises(openai.PermissionDeniedError) as caught:
            await client.chat.completions.create(model="fake-model", messages=CHAT)
        assert f'queue "made-up-{i}" is not open to tenant "alpha"' in caught.value.message
    assert len(catalog.decisions) <= before + 1  # the authorization, at most
    assert gateway.services.inference.catalog is catalog


async def test_over_quota_is_429_naming_level_and_resource(gateway: Gateway) -> None:
    client = gateway.client("tight")
    await client.chat.completions.create(model="fake-model", messages=CHAT, max_tokens=40)
    await gateway.settled()
    with pytest.raises(openai.RateLimitError) as caught:  # 12 + 45 fits in 60, not in 52
        await client.chat.completions.create(model="fake-model", messages=CHAT, max_tokens=45)
    response = caught.value.response
    assert int(response.headers["retry-after"]) >= 1
    assert response.headers["x-ratelimit-limit-tokens"] == "60"
    assert response.headers["x-ratelimit-remaining-tokens"] == str(60 - 8)
    detail = response.json()["error"]
    assert detail["code"] == "rate_limit_exceeded"
    assert detail["ignara"]["level"] == "ClusterQueue"
    assert detail["ignara"]["name"] == "team-tight"
    assert detail["ignara"]["resource"] == "tokens-per-minute"
    assert "tokens-per-minute" in detail["message"]
    # Requests run out too: two per minute.
    await client.chat.completions.create(model="fake-model", messages=CHAT, max_tokens=1)
    with pytest.raises(openai.RateLimitError) as caught:
        await client.chat.completions.create(model="fake-model", messages=CHAT, max_tokens=1)
    assert caught.value.response.json()["error"]["ignara"]["resource"] == "requests-per-minute"


async def test_a_waiting_queue_admits_the_call_when_capacity_returns(gateway: Gateway) -> None:
    gateway.upstream.chunk_delay = 0.05
    client = gateway.client("waiter")
    # The first call reserves 96 of 100 tokens while it streams, then uses only 8.
    first = await client.chat.completions.create(
        model="fake-model", messages=CHAT, max_tokens=85, stream=True
    )
    second = asyncio.create_task(
        client.chat.completions.create(model="fake-model", messages=CHAT, max_tokens=50)
    )
    await asyncio.sleep(0.1)
    assert not second.done()  # waiting, not refused
    [chunk async for chunk in first]
    answer = await asyncio.wait_for(second, timeout=5)
    assert answer.usage is not None and answer.usage.total_tokens == 8


@pytest.mark.parametrize(
    ("knob", "value", "status"),
    [
        ("fail_status", 500, 502),
        ("fail_status", 503, 502),
        ("malformed", True, 502),
        ("delay", 2 * FIRST_BYTE_TIMEOUT, 504),
    ],
)
async def test_upstream_failures_are_502_or_504_and_refunded(
    gateway: Gateway, knob: str, value: Any, status: int
) -> None:
    setattr(gateway.upstream, knob, value)
    with pytest.raises(openai.APIStatusError) as caught:
        await gateway.client("alpha").chat.completions.create(model="fake-model", messages=CHAT)
    assert caught.value.status_code == status
    assert caught.value.response.json()["error"]["type"] == "api_error"
    assert await gateway.usage("team-a") == 0
    assert await gateway.usage("team-a", "requests-per-minute") == 0


async def test_upstream_down_is_502_and_refunded(gateway: Gateway) -> None:
    await gateway.upstream.stop()
    with pytest.raises(openai.APIStatusError) as caught:
        await gateway.client("alpha").chat.completions.create(
            model="fake-model", messages=CHAT, stream=True
        )
    assert caught.value.status_code == 502
    assert await gateway.usage("team-a") == 0


async def test_a_stream_broken_before_its_first_chunk_is_502(gateway: Gateway) -> None:
    gateway.upstream.break_after = 0
    with pytest.raises(openai.APIStatusError) as caught:
        await gateway.client("alpha").chat.completions.create(
            model="fake-model", messages=CHAT, stream=True
        )
    assert caught.value.status_code == 502
    assert await gateway.usage("team-a") == 0


async def test_a_stream_broken_midway_ends_with_an_error_event(gateway: Gateway) -> None:
    gateway.upstream.break_after = 2
    stream = await gateway.client("alpha").chat.completions.create(
        model="fake-model", messages=CHAT, max_tokens=50, stream=True
    )
    received = []
    with pytest.raises(openai.APIError) as caught:
        async for chunk in stream:
            received.append(chunk)
    assert len(received) == 2
    assert "upstream" in caught.value.message
    # Charged what streamed (about a token per event), not the 50 reserved.
    assert 0 < await gateway.usage("team-a") < 20


async def test_a_client_that_leaves_cancels_the_upstream_call(gateway: Gateway) -> None:
    gateway.upstream.chunk_delay = 0.2
    gateway.upstream.completion_tokens = 50
    async with (
        httpx.AsyncClient(base_url=gateway.url) as http,
        http.stream(
            "POST",
            "/v1/chat/completions",
            json={"model": "fake-model", "messages": CHAT, "stream": True, "max_tokens": 50},
            headers={"Authorization": f"Bearer {gateway.keys['alpha']}"},
        ) as response,
    ):
        assert response.status_code == 200
        async for _ in response.aiter_bytes():
            break
    await asyncio.wait_for(gateway.upstream.disconnected.wait(), timeout=5)
    assert gateway.upstream.streams_finished == 0
    assert await gateway.usage("team-a") < 50  # charged what streamed, not the reservation


async def test_usage_records_reach_the_usage_api(gateway: Gateway) -> None:
    client = gateway.client("alpha")
    await client.chat.completions.create(model="fake-model", messages=CHAT, max_tokens=50)
    await client.embeddings.create(model="fake-embed", input="a b c")
    gateway.upstream.fail_status = 500
    with pytest.raises(openai.APIStatusError):
        await client.chat.completions.create(model="fake-model", messages=CHAT)
    await gateway.settled()
    await gateway.services.recorder.flush()
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        mine = await http.get(
            "/api/v1/usage", headers={"Authorization": f"Bearer {gateway.keys['alpha']}"}
        )
        theirs = await http.get(
            "/api/v1/usage", headers={"Authorization": f"Bearer {gateway.keys['beta']}"}
        )
    assert mine.status_code == 200, mine.text
    days = {row["model"]: row for row in mine.json()["days"]}
    assert days["fake-model"]["requests"] == 2 and days["fake-model"]["errors"] == 1
    assert days["fake-model"]["prompt_tokens"] == 3
    assert days["fake-model"]["completion_tokens"] == 5
    assert days["fake-embed"]["total_tokens"] == 3
    assert theirs.json()["days"] == []


async def test_an_unreachable_ledger_fails_closed_with_503(
    settings: Settings, upstream: FakeOpenAI
) -> None:
    async with running_gateway(settings, upstream, "redis://127.0.0.1:1/0") as gateway:
        with pytest.raises(openai.APIStatusError) as caught:
            await gateway.client("alpha").chat.completions.create(model="fake-model", messages=CHAT)
    assert caught.value.status_code == 503
    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.response.json()["error"]["code"] == "ledger_unavailable"
    assert upstream.total_requests == 0


async def test_a_call_cancelled_before_its_answer_gives_its_reservation_back(
    gateway: Gateway,
) -> None:
    """A server stopping (or anything cancelling the handler) mid-call leaks no quota."""
    gateway.upstream.delay = 0.5
    member = Identity(
        tenant="alpha",
        principal="bot",
        roles=frozenset({"member"}),
        scopes=frozenset({"inference"}),
        via="api-key",
    )
    body = b'{"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}'
    service = gateway.services.inference
    call = asyncio.create_task(service.handle(member, CallKind.CHAT, body, {}))
    await asyncio.sleep(0.2)
    ledger = service.ledger
    assert await ledger.usage("team-a", "llama", "tokens-per-minute") > 0  # reserved, in flight
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await gateway.usage("team-a") == 0
    assert await gateway.usage("team-a", "requests-per-minute") == 0
