"""How far past its reservation a call can take a queue: the output bound a call
reserves is the one the upstream gets, the largest bound named is reserved, input
estimates learn from the usage upstreams report, and a stream that writes past its
reservation is ended there, properly; end to end through the gateway, over HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway.inference.calls import CallKind, parse_call
from gateway.inference.estimates import InputCorrections, reserved_tokens
from gateway.inference.overrun import SLACK, OutputMeter
from gateway.settings import Settings
from tests.inference.test_v1_api import CHAT, Gateway, running_gateway
from tests.support.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration

LIMIT = 10_000  # team-a's tokens-per-minute (alpha's queue); team-b's (beta's) too
DEFAULT_MAX_TOKENS = 16  # the test config's inference.default_max_tokens
LONG = [{"role": "user", "content": " ".join(["word"] * 60)}]


@pytest.fixture(params=["memory", "redis"])
async def gateway(request: pytest.FixtureRequest, settings: Settings) -> AsyncIterator[Gateway]:
    """A fresh gateway (its corrections learned nothing) and upstream for each test."""
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    async with (
        FakeOpenAI(models=("fake-model", "fake-embed"), completion_tokens=5) as upstream,
        running_gateway(settings, upstream, redis_url) as gateway,
    ):
        yield gateway


def estimate(messages: list[dict[str, Any]]) -> int:
    """The gateway's static estimate of a chat call's input."""
    raw = json.dumps({"model": "fake-model", "messages": messages}).encode()
    return parse_call(CallKind.CHAT, raw, DEFAULT_MAX_TOKENS).prompt_tokens


async def reserve(gateway: Gateway, tenant: str, queue: str, **fields: Any) -> int:
    """Make a call; what it reserved, from the tokens the queue had left after its grant
    (everything earlier is settled first, and nothing else runs meanwhile)."""
    before = await gateway.usage(queue)
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        answer = await http.post(
            "/v1/chat/completions",
            json={"model": "fake-model", "messages": CHAT, **fields},
            headers={"Authorization": f"Bearer {gateway.keys[tenant]}"},
        )
    assert answer.status_code == 200, answer.text
    return LIMIT - before - int(answer.headers["x-ratelimit-remaining-tokens"])


async def test_a_call_naming_no_output_bound_is_forwarded_with_the_one_it_reserves(
    gateway: Gateway,
) -> None:
    reserved = await reserve(gateway, "alpha", "team-a", n=2)
    assert gateway.upstream.bodies[-1]["max_tokens"] == DEFAULT_MAX_TOKENS
    assert reserved == estimate(CHAT) + 2 * DEFAULT_MAX_TOKENS  # the bound, per completion
    # A bound the caller names goes as it was named.
    await reserve(gateway, "alpha", "team-a", max_completion_tokens=7)
    assert gateway.upstream.bodies[-1]["max_completion_tokens"] == 7
    assert "max_tokens" not in gateway.upstream.bodies[-1]


async def test_the_largest_of_several_bounds_is_reserved(gateway: Gateway) -> None:
    reserved = await reserve(gateway, "alpha", "team-a", max_tokens=40, max_completion_tokens=5)
    assert reserved == estimate(CHAT) + 40
    forwarded = gateway.upstream.bodies[-1]
    assert (forwarded["max_tokens"], forwarded["max_completion_tokens"]) == (40, 5)


async def test_input_estimates_learn_from_the_usage_upstreams_report(gateway: Gateway) -> None:
    gateway.upstream.prompt_scale = 4  # its tokenizer counts 4 tokens a word: 240
    first = await reserve(gateway, "alpha", "team-a", messages=LONG, max_tokens=5)
    assert first == estimate(LONG) + 5  # nothing learned yet: the static estimate
    for _ in range(2):
        await reserve(gateway, "alpha", "team-a", messages=LONG, max_tokens=5)
    await gateway.settled()
    learned = await reserve(gateway, "alpha", "team-a", messages=LONG, max_tokens=5)
    assert learned >= 240 + 5 > first
    # Another queue's calls of the model reserve what they did.
    other = await reserve(gateway, "beta", "team-b", messages=LONG, max_tokens=5)
    assert other == first


async def test_a_stream_past_its_reservation_is_cut_there_with_a_proper_end(
    gateway: Gateway,
) -> None:
    upstream = gateway.upstream
    upstream.ignore_max_tokens = True
    upstream.completion_tokens = 400
    upstream.chunk_delay = 0.002  # still writing when the gateway has had enough
    body = {
        "model": "fake-model",
        "messages": CHAT,
        "max_tokens": 20,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with (
        httpx.AsyncClient(base_url=gateway.url) as http,
        http.stream(
            "POST",
            "/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {gateway.keys['alpha']}"},
        ) as answer,
    ):
        assert answer.status_code == 200
        text = (await answer.aread()).decode()
    events = [event.removeprefix("data: ") for event in text.split("\n\n") if event]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    limit = 20 + 5 + SLACK  # the reservation, 25 % of it, and the slack
    assert 20 <= len(content) <= limit
    assert chunks[-2]["choices"] == [
        {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}
    ]
    assert chunks[-2]["id"] == chunks[0]["id"] and chunks[-2]["model"] == "fake-model"
    usage = chunks[-1]["usage"]
    # Charged what was read: what went on, and the event that passed the limit.
    assert chunks[-1]["choices"] == [] and usage["completion_tokens"] <= limit + 2
    assert upstream.streams_finished == 0  # the upstream connection was closed
    assert await gateway.usage("team-a") == usage["total_tokens"] <= estimate(CHAT) + limit + 2


async def test_the_openai_client_reads_a_cut_stream_to_its_end(gateway: Gateway) -> None:
    gateway.upstream.ignore_max_tokens = True
    gateway.upstream.completion_tokens = 300
    stream = await gateway.client("alpha").chat.completions.create(
        model="fake-model", messages=CHAT, max_tokens=10, stream=True
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(chunk.usage is None for chunk in chunks)  # it did not ask for usage
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert 10 <= len(text.split()) <= 10 + 3 + SLACK


async def test_made_up_model_names_never_reach_the_corrections(gateway: Gateway) -> None:
    gateway.upstream.prompt_scale = 4
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        for i in range(50):
            answer = await http.post(
                "/v1/chat/completions",
                json={"model": f"made-up-{i}", "messages": LONG},
                headers={"Authorization": f"Bearer {gateway.keys['alpha']}"},
            )
            assert answer.status_code == 404
    await reserve(gateway, "alpha", "team-a", messages=LONG)
    await gateway.settled()
    assert len(gateway.services.inference.corrections) == 1


def test_the_corrections_table_is_bounded() -> None:
    corrections = InputCorrections(max_entries=8)
    for i in range(1000):
        corrections.learn(f"model-{i}", "q", estimated=100, reported=300)
    assert len(corrections) == 8
    assert corrections.factor("model-999", "q") == 3.0
    assert corrections.factor("model-0", "q") == 1.0  # the oldest went first


def test_corrections_only_scale_up_and_stay_within_their_maximum() -> None:
    corrections = InputCorrections(max_factor=4.0)
    corrections.learn("m", "q", estimated=100, reported=50)
    assert corrections.factor("m", "q") == 1.0
    for _ in range(20):
        corrections.learn("m", "q", estimated=100, reported=100_000)
    assert 3.9 < corrections.factor("m", "q") <= 4.0
    # A short prompt's template tokens are no reason to scale a long one.
    corrections.learn("m", "short", estimated=5, reported=30)
    assert corrections.factor("m", "short") == 1.0


def test_a_corrected_reservation_never_exceeds_what_the_queue_could_get() -> None:
    raw = json.dumps({"model": "m", "messages": LONG, "max_tokens": 10}).encode()
    call = parse_call(CallKind.CHAT, raw, DEFAULT_MAX_TOKENS)  # 83 + 10
    assert reserved_tokens(call, 300, [10_000, 200]) == 200
    assert reserved_tokens(call, 300, [10_000]) == 310
    assert reserved_tokens(call, 300, [50]) == call.estimate  # refused as before, by size


def sse(**choice: Any) -> bytes:
    body = {"id": "c", "model": "m", "choices": [{"index": 0, **choice}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def test_chunks_of_many_tokens_are_counted_by_their_characters() -> None:
    meter = OutputMeter(reserved=100, margin=0.25, chat=False, prompt=lambda: 10, usage_chunk=False)
    block = sse(text="x" * 40) * 20  # 10 tokens an event at four characters a token
    kept, over = meter.take(block, b"\n\n")
    assert over and kept == sse(text="x" * 40) * 14  # 140 tokens; the 15th passes 141
    assert meter.ending(b"\n\n").endswith(b'"finish_reason":"length"}]}\n\ndata: [DONE]\n\n')


def test_an_honest_stream_is_never_cut() -> None:
    meter = OutputMeter(reserved=100, margin=0.25, chat=True, prompt=lambda: 10, usage_chunk=False)
    block = sse(delta={"role": "assistant", "content": ""})
    # 100 tokens of five characters each, at most max_tokens as an honest upstream
    block += sse(delta={"content": " word"}) * 100 + sse(delta={}, finish_reason="length")
    block += b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":1}}\n\ndata: [DONE]\n\n'
    assert meter.take(block, b"\n\n") == (block, False)


def test_the_bounds_are_on_by_default_and_each_can_be_turned_off() -> None:
    on = Settings.from_env({}).inference
    assert (on.cap_output, on.estimate_max_factor, on.stream_cut_margin) == (True, 8.0, 0.25)
    off = Settings.from_env(
        {
            "IGNARA_CAP_OUTPUT": "0",
            "IGNARA_ESTIMATE_MAX_FACTOR": "1",
            "IGNARA_STREAM_CUT_MARGIN": "off",
        }
    ).inference
    assert (off.cap_output, off.estimate_max_factor, off.stream_cut_margin) == (False, 1.0, None)
    assert not InputCorrections(max_factor=off.estimate_max_factor).enabled


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("IGNARA_ESTIMATE_MAX_FACTOR", "0.5"),
        ("IGNARA_ESTIMATE_MAX_FACTOR", "lots"),
        ("IGNARA_STREAM_CUT_MARGIN", "-0.1"),
        ("IGNARA_STREAM_CUT_MARGIN", "nan"),
    ],
)
def test_a_bad_bound_is_refused_by_name(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        Settings.from_env({name: value})
