"""The token ledger's Redis frozen (alive, answering nothing) or killed: every inference
call is refused at once with a JSON 503 naming the ledger, and calls succeed again soon
after it is back. The outage is logged once, then counted, then its end."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gateway.ledgers import LedgerUnavailableError
from gateway.settings import Settings
from tests.faults.failfast import CHAT, FailfastGateway, assert_unavailable, failfast_gateway, until
from tests.support.faults import OwnedRedis
from tests.support.relay import Relay, relay

pytestmark = pytest.mark.integration


@pytest.fixture
def owned_redis() -> Iterator[OwnedRedis]:
    with OwnedRedis() as server:
        yield server


@pytest.fixture
async def gateway(
    settings: Settings, owned_redis: OwnedRedis, tmp_path: Path
) -> AsyncIterator[FailfastGateway]:
    async with failfast_gateway(
        settings, database_url=f"sqlite:///{tmp_path / 'gw.db'}", redis_url=owned_redis.url
    ) as gateway:
        yield gateway


async def test_a_frozen_redis_refuses_calls_at_once_and_they_work_again_after_it_thaws(
    gateway: FailfastGateway, owned_redis: OwnedRedis
) -> None:
    owned_redis.freeze()
    try:
        # Many at once, as under load: each is answered (the client gives up after
        # CLIENT_TIMEOUT seconds, and today's gateway holds them for ever).
        answers = await asyncio.gather(*(gateway.chat() for _ in range(20)))
        for answer in answers:
            error = assert_unavailable(answer, "ledger_unavailable")
            assert "ledger" in error["message"]
        # One more after the first wave, on the connection made since.
        assert_unavailable(await gateway.chat(), "ledger_unavailable")
    finally:
        owned_redis.thaw()
    await until(gateway.chat, 200, within=5)
    again = await asyncio.gather(*(gateway.chat() for _ in range(5)))
    assert [r.status_code for r in again] == [200] * 5


@pytest.fixture
async def cut_off(
    settings: Settings, owned_redis: OwnedRedis, tmp_path: Path
) -> AsyncIterator[tuple[FailfastGateway, Relay]]:
    """A gateway whose way to Redis goes through a relay: a network that can drop."""
    async with (
        relay("127.0.0.1", owned_redis.port) as way,
        failfast_gateway(
            settings,
            database_url=f"sqlite:///{tmp_path / 'gw.db'}",
            redis_url=f"redis://127.0.0.1:{way.port}/0",
        ) as gateway,
    ):
        yield gateway, way


async def test_calls_that_end_while_redis_is_out_of_reach_are_settled_once_it_is_back(
    cut_off: tuple[FailfastGateway, Relay],
) -> None:
    """A stream that ends while the network to Redis drops everything cannot settle then;
    its reservation (the whole max_tokens) must not stay charged against the queue's
    window and budgets: it is settled at what it used once Redis is back."""
    gateway, way = cut_off
    ledger = gateway.services.inference.ledger
    before = await ledger.usage("team-a", "llama", "tokens-per-minute")
    held = asyncio.Event()
    gateway.upstream.holds["held"] = held
    body = {**CHAT, "max_tokens": 400, "stream": True, "user": "held"}

    async def stream() -> int:
        async with gateway.http.stream(
            "POST", "/v1/chat/completions", json=body, headers=gateway.auth("used")
        ) as response:
            await response.aread()
            return response.status_code

    calls = [asyncio.create_task(stream()) for _ in range(3)]
    while gateway.upstream.requests["/v1/chat/completions"] < 4:  # 1 made at start
        await asyncio.sleep(0.02)
    reserved = await ledger.usage("team-a", "llama", "tokens-per-minute") - before
    assert reserved >= 3 * 400, reserved
    way.freeze()
    try:
        held.set()
        assert await asyncio.gather(*calls) == [200] * 3
        await asyncio.sleep(1.5)  # their settles are lost meanwhile
    finally:
        way.thaw()
    used = 3 * (1 + gateway.upstream.completion_tokens)  # "hi": one word of prompt

    async def charged() -> int | None:
        try:
            return await ledger.usage("team-a", "llama", "tokens-per-minute") - before
        except LedgerUnavailableError:  # a connection made while it was cut off
            return None

    deadline = asyncio.get_running_loop().time() + 10
    while (now := await charged()) != used:
        assert asyncio.get_running_loop().time() < deadline, (now, used)
        await asyncio.sleep(0.1)


async def test_a_killed_redis_refuses_calls_at_once_and_service_resumes_when_it_restarts(
    gateway: FailfastGateway, owned_redis: OwnedRedis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    owned_redis.kill()
    for _ in range(5):
        assert_unavailable(await gateway.chat(), "ledger_unavailable")
    # The other routes do not need the ledger and keep working.
    listed = await gateway.http.get("/api/v1/workloads", headers=gateway.auth("used"))
    assert listed.status_code == 200, listed.text
    await asyncio.to_thread(owned_redis.start)  # empty: its state is lost (not this test's)
    await until(gateway.chat, 200, within=5)
    told = [r.getMessage() for r in caplog.records if r.name.startswith("gateway")]
    about_redis = [m for m in told if m.startswith("redis ")]
    assert len(about_redis) == 2, told
    assert about_redis[0].startswith("redis down: ")
    assert about_redis[1].startswith("redis back after ")
    assert about_redis[1].endswith(": 5 calls failed meanwhile")


async def test_an_outage_with_many_refused_calls_logs_a_few_lines(
    gateway: FailfastGateway, owned_redis: OwnedRedis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    caplog.clear()
    owned_redis.kill()
    refused = 0
    for _ in range(20):
        answers = await asyncio.gather(*(gateway.chat() for _ in range(25)))
        for answer in answers:
            assert_unavailable(answer, "ledger_unavailable")
            refused += 1
    await asyncio.to_thread(owned_redis.start)
    await until(gateway.chat, 200, within=5)
    await gateway.services.inference.drain()

    lines = [r for r in caplog.records if r.name.startswith("gateway")]
    assert refused == 500
    assert len(lines) <= 6, [r.getMessage() for r in lines]
    errors = [r.getMessage() for r in lines if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith("redis down: "), errors
    back = [r.getMessage() for r in lines if "redis back after" in r.getMessage()]
    assert len(back) == 1 and "500 calls failed" in back[0], back
