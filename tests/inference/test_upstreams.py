"""The model registry and the upstream client against real FakeOpenAI servers."""

from __future__ import annotations

import asyncio
import json
import random
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.inference import (
    Endpoint,
    HealthChecker,
    ModelRegistry,
    ModelRoute,
    RegistryError,
    SmoothWeightedBalancer,
    Timeouts,
    UpstreamClient,
    UpstreamStreamBroken,
    UpstreamTimeout,
    UpstreamUnavailable,
    WeightedRandomBalancer,
)
from tests.support.fake_openai import FakeOpenAI

CHAT = json.dumps(
    {"model": "fake-model", "messages": [{"role": "user", "content": "say three words"}]}
).encode()
STREAM_CHAT = json.dumps(
    {
        "model": "fake-model",
        "messages": [{"role": "user", "content": "say three words"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
).encode()
HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer caller-key"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def route(*fakes: FakeOpenAI | str, weights: tuple[int, ...] = ()) -> ModelRoute:
    urls = [f if isinstance(f, str) else f.base_url for f in fakes]
    endpoints = tuple(
        Endpoint(base_url=url, weight=weights[i] if weights else 1) for i, url in enumerate(urls)
    )
    return ModelRoute(model="fake-model", flavor="pool", endpoints=endpoints)


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def fake2() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


# Long enough that a loaded test machine never times out a call that should succeed;
# the upstreams meant to be too slow wait twice it.
FIRST_BYTE_TIMEOUT = 2.0


@pytest.fixture
async def client() -> AsyncIterator[UpstreamClient]:
    timeouts = Timeouts(connect=1.0, first_byte=FIRST_BYTE_TIMEOUT, total=10.0)
    async with UpstreamClient(timeouts=timeouts) as upstream:
        yield upstream


# -- registry ---------------------------------------------------------------------------------

GOOD = {
    "name": "llama-3-8b",
    "flavor": "llama-pool",
    "endpoints": [
        {"base_url": "http://127.0.0.1:9000/v1/", "api_key_env": "LLAMA_KEY", "weight": 2}
    ],
}


def with_endpoint(**changes: Any) -> dict[str, Any]:
    return {**GOOD, "endpoints": [{**GOOD["endpoints"][0], **changes}]}


INVALID: dict[str, list[dict[str, Any]]] = {
    "empty model name": [{**GOOD, "name": ""}],
    "model name with spaces": [{**GOOD, "name": "llama 3"}],
    "flavor with capitals": [{**GOOD, "flavor": "Llama"}],
    "missing flavor": [{"name": "m", "endpoints": GOOD["endpoints"]}],
    "no endpoints": [{**GOOD, "endpoints": []}],
    "unknown model key": [{**GOOD, "extra": 1}],
    "unknown endpoint key": [with_endpoint(region="eu")],
    "ftp url": [with_endpoint(base_url="ftp://127.0.0.1/v1")],
    "url without host": [with_endpoint(base_url="http:///v1")],
    "url with credentials": [with_endpoint(base_url="http://u:p@127.0.0.1/v1")],
    "url with query": [with_endpoint(base_url="http://127.0.0.1/v1?x=1")],
    "url not a string": [with_endpoint(base_url=42)],
    "zero weight": [with_endpoint(weight=0)],
    "bool weight": [with_endpoint(weight=True)],
    "string weight": [with_endpoint(weight="2")],
    "bad env name": [with_endpoint(api_key_env="LLAMA-KEY")],
    "env var not set": [with_endpoint(api_key_env="UNSET_KEY")],
    "duplicate model": [GOOD, GOOD],
    "duplicate endpoint": [{**GOOD, "endpoints": [GOOD["endpoints"][0], GOOD["endpoints"][0]]}],
}


@pytest.mark.parametrize("items", list(INVALID.values()), ids=list(INVALID))
def test_registry_rejects_invalid_config(items: list[dict[str, Any]]) -> None:
    with pytest.raises(RegistryError):
        ModelRegistry.from_config(items, environ={"LLAMA_KEY": "secret-value"})


def test_registry_builds_routes_and_keeps_the_key_out_of_repr() -> None:
    second = {
        "name": "meta/llama-70b",
        "flavor": "big",
        "endpoints": [{"base_url": "https://x/v1"}],
    }
    registry = ModelRegistry.from_config([GOOD, second], environ={"LLAMA_KEY": "secret-value"})
    assert registry.models() == ["llama-3-8b", "meta/llama-70b"]
    found = registry.route("llama-3-8b")
    assert found is not None
    assert found.flavor == "llama-pool"
    (endpoint,) = found.endpoints
    assert endpoint.base_url == "http://127.0.0.1:9000/v1"
    assert endpoint.weight == 2
    assert endpoint.api_key == "secret-value"
    assert "secret-value" not in repr(found)
    assert registry.route("missing") is None
    assert [e.base_url for e in registry.endpoints()] == [
        "http://127.0.0.1:9000/v1",
        "https://x/v1",
    ]


# -- balancing --------------------------------------------------------------------------------


def test_smooth_weighted_round_robin_interleaves() -> None:
    r = route("http://a/v1", "http://b/v1", weights=(3, 1))
    balancer = SmoothWeightedBalancer()
    firsts = [balancer.order(r, r.endpoints)[0].base_url[7] for _ in range(8)]
    assert firsts == list("aabaaaba")
    assert [e.base_url for e in balancer.order(r, r.endpoints)] == ["http://a/v1", "http://b/v1"]


def test_weighted_random_is_seeded_and_weighted() -> None:
    r = route("http://a/v1", "http://b/v1", weights=(9, 1))

    def picks(seed: int) -> list[str]:
        balancer = WeightedRandomBalancer(random.Random(seed))
        return [balancer.order(r, r.endpoints)[0].base_url for _ in range(200)]

    assert picks(7) == picks(7)
    assert 150 < picks(7).count("http://a/v1") < 200
    assert all(len(WeightedRandomBalancer().order(r, r.endpoints)) == 2 for _ in range(10))


async def test_routes_by_weight_over_two_upstreams(
    client: UpstreamClient, fake: FakeOpenAI, fake2: FakeOpenAI
) -> None:
    r = route(fake, fake2, weights=(3, 1))
    for _ in range(8):
        response = await client.forward(r, "/chat/completions", CHAT, HEADERS)
        assert response.status == 200
    assert (fake.total_requests, fake2.total_requests) == (6, 2)


# -- non-streaming calls ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "payload", "usage"),
    [
        ("/chat/completions", {"messages": [{"role": "user", "content": "a b c"}]}, (3, 5)),
        ("/completions", {"prompt": "one two", "max_tokens": 2}, (2, 2)),
        ("/embeddings", {"input": ["x y", "z"]}, (3, None)),
    ],
)
async def test_forwards_body_and_usage(
    client: UpstreamClient,
    fake: FakeOpenAI,
    path: str,
    payload: dict[str, Any],
    usage: tuple[int, int | None],
) -> None:
    body = json.dumps({"model": "fake-model", **payload}).encode()
    response = await client.forward(route(fake), path, body, HEADERS)
    assert response.status == 200 and not response.streaming
    assert response.body is not None
    got = json.loads(response.body)["usage"]
    assert (got["prompt_tokens"], got.get("completion_tokens")) == usage
    assert response.headers["content-type"].startswith("application/json")


async def test_sends_the_endpoint_key_not_the_callers(
    client: UpstreamClient, fake: FakeOpenAI
) -> None:
    registry = ModelRegistry.from_config(
        [
            {
                "name": "m",
                "flavor": "f",
                "endpoints": [{"base_url": fake.base_url, "api_key_env": "K"}],
            }
        ],
        environ={"K": "upstream-secret"},
    )
    r = registry.route("m")
    assert r is not None
    await client.forward(r, "/chat/completions", CHAT, HEADERS)
    await client.forward(route(fake), "/chat/completions", CHAT, HEADERS)
    assert fake.auth_headers == ["Bearer upstream-secret", None]


async def test_malformed_json_is_passed_through_unparsed(
    client: UpstreamClient, fake: FakeOpenAI, fake2: FakeOpenAI
) -> None:
    fake.malformed = True
    response = await client.forward(route(fake, fake2), "/chat/completions", CHAT, HEADERS)
    assert response.status == 200
    assert response.body == b'{"id": "broken'
    assert fake2.total_requests == 0


async def test_client_errors_are_returned_not_retried(
    client: UpstreamClient, fake: FakeOpenAI, fake2: FakeOpenAI
) -> None:
    fake.fail_status = 400
    response = await client.forward(route(fake, fake2), "/chat/completions", CHAT, HEADERS)
    assert response.status == 400
    assert fake2.total_requests == 0


# -- retries ----------------------------------------------------------------------------------


async def test_retries_next_endpoint_on_connect_error(
    client: UpstreamClient, fake: FakeOpenAI
) -> None:
    r = route(dead_url(), fake)
    response = await client.forward(r, "/chat/completions", CHAT, HEADERS)
    assert response.status == 200
    assert response.endpoint.base_url == fake.base_url


async def test_retries_next_endpoint_on_first_byte_timeout(
    client: UpstreamClient, fake: FakeOpenAI, fake2: FakeOpenAI
) -> None:
    fake.delay = 2 * FIRST_BYTE_TIMEOUT
    response = await client.forward(route(fake, fake2), "/chat/completions", CHAT, HEADERS)
    assert response.status == 200
    assert response.endpoint.base_url == fake2.base_url
    assert (fake.total_requests, fake2.total_requests) == (1, 1)


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_retries_next_endpoint_on_5xx(
    client: UpstreamClient, fake: FakeOpenAI, fake2: FakeOpenAI, status: int
) -> None:
    fake.fail_status = status
    response = await client.forward(route(fake, fake2), "/chat/completions", CHAT, HEADERS)
    assert response.status == 200
    assert (fake.total_requests, fake2.total_requests) == (1, 1)


async def test_all_endpoints_down_is_unavailable(client: UpstreamClient) -> None:
    with pytest.raises(UpstreamUnavailable) as info:
        await client.forward(route(dead_url(), dead_url()), "/chat/completions", CHAT, HEADERS)
    assert info.value.code == "upstream_unavailable" and info.value.http_status == 502
    assert len(info.value.attempts) == 2


async def test_all_endpoints_5xx_is_unavailable(
    client: UpstreamClient, fake: FakeOpenAI, fake2: FakeOpenAI
) -> None:
    fake.fail_status = fake2.fail_status = 503
    with pytest.raises(UpstreamUnavailable):
        await client.forward(route(fake, fake2), "/chat/completions", CHAT, HEADERS)
    assert (fake.total_requests, fake2.total_requests) == (1, 1)


async def test_slow_past_timeout_is_upstream_timeout(
    client: UpstreamClient, fake: FakeOpenAI
) -> None:
    fake.delay = 2 * FIRST_BYTE_TIMEOUT
    with pytest.raises(UpstreamTimeout) as info:
        await asyncio.wait_for(
            client.forward(route(fake), "/chat/completions", CHAT, HEADERS),
            timeout=FIRST_BYTE_TIMEOUT + 3,
        )
    assert info.value.code == "upstream_timeout" and info.value.http_status == 504


async def test_total_timeout_bounds_a_slow_stream(fake: FakeOpenAI) -> None:
    fake.chunk_delay = 0.2
    async with UpstreamClient(timeouts=Timeouts(first_byte=1.0, total=0.5)) as client:
        response = await client.forward(route(fake), "/chat/completions", STREAM_CHAT, HEADERS)
        assert response.chunks is not None
        with pytest.raises(UpstreamTimeout):
            async with asyncio.timeout(3):
                async for _ in response.chunks:
                    pass


# -- streaming --------------------------------------------------------------------------------


async def test_stream_passes_sse_through_with_usage_and_done(
    client: UpstreamClient, fake: FakeOpenAI
) -> None:
    response = await client.forward(route(fake), "/chat/completions", STREAM_CHAT, HEADERS)
    assert response.status == 200 and response.chunks is not None
    assert response.headers["content-type"] == "text/event-stream"
    async with asyncio.timeout(3), response:
        raw = b"".join([chunk async for chunk in response.chunks])
    events = [line[6:] for line in raw.decode().split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    payloads = [json.loads(e) for e in events[:-1]]
    assert "".join(p["choices"][0]["delta"].get("content", "") for p in payloads[:-1]) == (
        "tok0 tok1 tok2 tok3 tok4 "
    )
    assert payloads[-1]["choices"] == []
    assert payloads[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    assert fake.streams_finished == 1


async def test_stream_chunks_arrive_incrementally(client: UpstreamClient, fake: FakeOpenAI) -> None:
    fake.chunk_delay = 0.1
    response = await client.forward(route(fake), "/chat/completions", STREAM_CHAT, HEADERS)
    assert response.chunks is not None
    async with asyncio.timeout(5), response:
        first = await anext(response.chunks)
        assert first.startswith(b"data: ")
        assert fake.streams_finished == 0
        rest = [chunk async for chunk in response.chunks]
    assert len(rest) >= 3
    assert fake.streams_finished == 1


async def test_broken_stream_raises_and_is_not_retried(
    client: UpstreamClient, fake: FakeOpenAI, fake2: FakeOpenAI
) -> None:
    fake.break_after = 2
    response = await client.forward(route(fake, fake2), "/chat/completions", STREAM_CHAT, HEADERS)
    assert response.chunks is not None
    received: list[bytes] = []
    with pytest.raises(UpstreamStreamBroken) as info:
        async with asyncio.timeout(3):
            async for chunk in response.chunks:
                received.append(chunk)
    assert info.value.code == "upstream_stream_broken"
    assert b"tok0" in b"".join(received)
    assert fake2.total_requests == 0
    assert response.chunks.closed


async def test_caller_that_stops_iterating_closes_the_upstream(
    client: UpstreamClient, fake: FakeOpenAI
) -> None:
    fake.chunk_delay = 0.05
    fake.completion_tokens = 100
    response = await client.forward(route(fake), "/chat/completions", STREAM_CHAT, HEADERS)
    assert response.chunks is not None
    async with response:
        async for _ in response.chunks:
            break
    await asyncio.wait_for(fake.disconnected.wait(), timeout=3)
    assert fake.disconnects == 1 and fake.streams_finished == 0


async def test_cancelled_reader_closes_the_upstream(
    client: UpstreamClient, fake: FakeOpenAI
) -> None:
    fake.chunk_delay = 0.05
    fake.completion_tokens = 100
    response = await client.forward(route(fake), "/chat/completions", STREAM_CHAT, HEADERS)
    chunks = response.chunks
    assert chunks is not None

    async def read_all() -> None:
        async for _ in chunks:
            pass

    task = asyncio.create_task(read_all())
    await asyncio.sleep(0.15)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert chunks.closed
    await asyncio.wait_for(fake.disconnected.wait(), timeout=3)


# -- health checks ----------------------------------------------------------------------------


async def test_health_checker_marks_down_endpoint_and_it_is_skipped(
    client: UpstreamClient, fake: FakeOpenAI, fake2: FakeOpenAI
) -> None:
    registry = ModelRegistry.from_config(
        [
            {
                "name": "fake-model",
                "flavor": "pool",
                "endpoints": [{"base_url": fake.base_url}, {"base_url": fake2.base_url}],
            }
        ],
        environ={},
    )
    r = registry.route("fake-model")
    assert r is not None
    # A stopped server refuses at once; the timeout only has to spare a slow, healthy one.
    checker = HealthChecker(registry, client, interval=0.05, timeout=2.0)
    await checker.start()
    try:
        assert client.is_healthy(r.endpoints[0]) and client.is_healthy(r.endpoints[1])
        await fake.stop()
        async with asyncio.timeout(3):
            while client.is_healthy(r.endpoints[0]):
                await asyncio.sleep(0.02)
        served = fake2.total_requests
        for _ in range(4):
            response = await client.forward(r, "/chat/completions", CHAT, HEADERS)
            assert response.endpoint.base_url == fake2.base_url
        assert fake2.total_requests - served == 4
        await fake.start()
        async with asyncio.timeout(3):
            while not client.is_healthy(r.endpoints[0]):
                await asyncio.sleep(0.02)
    finally:
        await checker.stop()
    assert not checker.running


async def test_all_unhealthy_fails_open(client: UpstreamClient, fake: FakeOpenAI) -> None:
    r = route(fake)
    client.mark(r.endpoints[0], healthy=False)
    response = await client.forward(r, "/chat/completions", CHAT, HEADERS)
    assert response.status == 200
