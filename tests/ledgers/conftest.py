"""Ledger fixtures: ``make_ledger`` builds either implementation from a config; the
batcher's tests run on both event loops."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping

import pytest
import uvloop

from gateway.ledgers import Ledger, MemoryLedger, RedisLedger
from quota.model import QuotaConfig
from tests.support.redis import unique_prefix

MakeLedger = Callable[[QuotaConfig], Ledger]

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, LoopFactory]:
    """The batcher sits on a transport's callbacks, which each event loop implements
    itself: its tests run on asyncio's own loop and on uvloop (the gateway's)."""
    if item.path.name == "test_batching.py":
        return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}


@pytest.fixture(params=["memory", "redis"])
async def make_ledger(request: pytest.FixtureRequest) -> AsyncIterator[MakeLedger]:
    """Builds ledgers of one kind, each Redis one under a prefix of its own."""
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    made: list[Ledger] = []

    def make(config: QuotaConfig) -> Ledger:
        if url is None:
            ledger: Ledger = MemoryLedger(config)
        else:
            ledger = RedisLedger.from_url(url, config, prefix=unique_prefix("ledger"))
        made.append(ledger)
        return ledger

    yield make
    for ledger in made:
        await ledger.aclose()
