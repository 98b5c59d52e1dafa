"""The chargeback ledger agrees with the token ledger: after a randomized run of
inference calls through the real gateway (chat, completions, embeddings, streamed or
not, some failing upstream, some streams cut, some refused for quota), the tokens the
ledger charged a queue today are what the token ledger's day budget charged it."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest

from gateway.settings import Settings
from tests.inference.test_v1_api import Gateway, running_gateway
from tests.support.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration

QUEUE, TENANT = "team-budget", "saver"  # 1,000 tokens a day (test_v1_api.config)
SEEDS = (20261126, 7)


@pytest.fixture(params=["memory", "redis"])
async def gateway(request: pytest.FixtureRequest, settings: Settings) -> AsyncIterator[Gateway]:
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    async with (
        FakeOpenAI(models=("fake-model", "fake-embed"), completion_tokens=5) as upstream,
        running_gateway(settings, upstream, redis_url) as gateway,
    ):
        yield gateway


def words(rng: random.Random) -> str:
    return " ".join(f"w{i}" for i in range(rng.randint(1, 12)))


async def one_call(gateway: Gateway, rng: random.Random) -> str:
    """A random call; returns how it ended (the status, or "ok")."""
    client = gateway.client(TENANT)
    kind = rng.choice(["chat", "chat-stream", "completion", "completion-stream", "embedding"])
    max_tokens = rng.choice([None, 1, 3, 8, 20])
    extra: dict[str, Any] = {} if max_tokens is None else {"max_tokens": max_tokens}
    try:
        if kind.startswith("chat"):
            messages = [{"role": "user", "content": words(rng)}]
            if kind == "chat":
                await client.chat.completions.create(model="fake-model", messages=messages, **extra)
            else:
                stream = await client.chat.completions.create(
                    model="fake-model", messages=messages, stream=True, **extra
                )
                async for _ in stream:
                    pass
        elif kind.startswith("completion"):
            if kind == "completion":
                await client.completions.create(model="fake-model", prompt=words(rng), **extra)
            else:
                stream = await client.completions.create(
                    model="fake-model", prompt=words(rng), stream=True, **extra
                )
                async for _ in stream:
                    pass
        else:
            await client.embeddings.create(model="fake-embed", input=words(rng))
    except openai.APIStatusError as err:
        return str(err.status_code)
    except openai.APIError:
        return "cut"  # a stream ended by an error event
    return "ok"


async def randomized_run(gateway: Gateway, rng: random.Random) -> list[str]:
    upstream = gateway.upstream
    outcomes: list[str] = []
    for _ in range(12):
        # The upstream's mood for this round (its knobs are global, so one per round).
        upstream.fail_status = rng.choice([None, None, None, 500])
        upstream.break_after = rng.choice([None, None, 1, 3])
        upstream.completion_tokens = rng.randint(0, 9)
        upstream.prompt_scale = rng.choice([1, 1, 2])
        batch = [one_call(gateway, rng) for _ in range(rng.randint(1, 6))]
        outcomes += await asyncio.gather(*batch)
    upstream.fail_status = upstream.break_after = None
    return outcomes


async def ledger_tokens_today(gateway: Gateway) -> Decimal:
    """The queue's input and output tokens today, as the chargeback report says."""
    today = datetime.now(UTC).date().isoformat()
    params = {"start": today, "end": today, "per": "day", "group_by": "queue,resource"}
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        response = await http.get(
            "/api/v1/usage",
            params=params,
            headers={"Authorization": f"Bearer {gateway.keys[TENANT]}"},
        )
    assert response.status_code == 200, response.text
    rows = response.json()["rows"]
    assert {r["group"]["queue"] for r in rows} <= {QUEUE}
    return sum((Decimal(a) for r in rows for a in r["amounts"].values()), Decimal(0))


@pytest.mark.parametrize("seed", SEEDS)
async def test_the_days_token_charges_equal_what_the_token_ledger_charged(
    gateway: Gateway, seed: int
) -> None:
    day = datetime.now(UTC).date()
    outcomes = await randomized_run(gateway, random.Random(seed))
    charged = await gateway.usage(QUEUE, "tokens-per-day")  # waits for every settle
    await gateway.services.recorder.flush()
    if datetime.now(UTC).date() != day:
        pytest.skip("the UTC day changed during the run: the day budget started afresh")
    assert "ok" in outcomes and len(set(outcomes)) > 1, outcomes  # a mix, not one path
    assert charged > 0
    assert await ledger_tokens_today(gateway) == charged, outcomes
