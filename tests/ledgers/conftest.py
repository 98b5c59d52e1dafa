"""Ledger fixtures: ``make_ledger`` builds either implementation from a config."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from gateway.ledgers import Ledger, MemoryLedger, RedisLedger
from quota.model import QuotaConfig
from tests.support.redis import unique_prefix

MakeLedger = Callable[[QuotaConfig], Ledger]


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
