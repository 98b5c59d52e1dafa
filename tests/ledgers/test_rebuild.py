"""A Redis that lost its state (restarted without persistence, evicted) is rebuilt from
the durable account of what was spent before anything is granted again; ids never
repeat across such a loss, so a grant from before it settles nothing after it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from redis.asyncio import Redis

from gateway.ledgers import (
    Grant,
    LedgerUnavailableError,
    RecentSpend,
    RedisLedger,
    Refusal,
    Spent,
)
from tests.ledgers.configs import POOL, RPM, T0, TPD, TPM, team
from tests.support.faults import OwnedRedis
from tests.support.redis import unique_prefix


class Account:
    """A stand-in for the usage records: what it says was spent, and how often read."""

    def __init__(self) -> None:
        self.spent = Spent(T0)
        self.reads = 0
        self.delay = 0.0
        self.fails: Exception | None = None

    async def __call__(self) -> Spent:
        self.reads += 1
        await asyncio.sleep(self.delay)
        if self.fails is not None:
            raise self.fails
        return self.spent


@asynccontextmanager
async def ledgers(
    redis_url: str, count: int = 1
) -> AsyncIterator[tuple[list[RedisLedger], Account, Callable[[], asyncio.Future[None]]]]:
    """``count`` replicas on one fresh prefix and one account; and ``lose()``, which
    deletes every key of the prefix, as a Redis restarted empty has them."""
    prefix = unique_prefix("rebuild")
    account = Account()
    made = []
    for _ in range(count):
        ledger = RedisLedger.from_url(redis_url, team(), prefix=prefix)
        ledger.restore_from(account)
        made.append(ledger)
    client: Redis = Redis.from_url(redis_url)

    async def wipe() -> None:
        keys = [key async for key in client.scan_iter(match="{" + prefix + "}*")]
        if keys:
            await client.delete(*keys)

    try:
        yield made, account, lambda: asyncio.ensure_future(wipe())
    finally:
        for ledger in made:
            await ledger.aclose()
        await client.aclose()


async def test_a_fresh_redis_is_rebuilt_from_what_was_spent_before_serving(
    redis_url: str,
) -> None:
    async with ledgers(redis_url) as ([ledger], account, _):
        account.spent = Spent(
            T0,
            budgets={("a", POOL, TPD): 4000, ("b", POOL, TPD): 5000, ("gone", POOL, TPD): 7},
            recent={("a", POOL): RecentSpend(tokens=900, requests=3, last_at=T0 - 10)},
        )
        await ledger.update_config(team(), now=T0)  # at start: rebuilt before any call
        assert account.reads == 1 and ledger.rebuilds == 1
        assert await ledger.usage("a", POOL, TPD, now=T0) == 4000
        assert await ledger.usage("b", POOL, TPD, now=T0) == 5000
        assert await ledger.usage("a", POOL, TPM, now=T0) == 900
        assert await ledger.usage("a", POOL, RPM, now=T0) == 3
        # a may take 1500 tokens a minute (1000 + 500 borrowed): 600 are left
        refused = await ledger.reserve("a", POOL, {TPM: 700}, now=T0)
        assert isinstance(refused, Refusal) and refused.resource == TPM
        # org's 10,000 tokens a day (a's and b's 5000 each): 1000 are left
        refused = await ledger.reserve("a", POOL, {TPD: 1001}, now=T0)
        assert isinstance(refused, Refusal) and refused.resource == TPD
        # the last minute's spend counts until a minute after the latest call
        assert await ledger.usage("a", POOL, TPM, now=T0 + 50) == 0
        assert account.reads == 1  # an epoch in place: no rebuild at each call


async def test_a_lost_state_is_rebuilt_at_the_next_call_and_old_grants_settle_nothing(
    redis_url: str,
) -> None:
    async with ledgers(redis_url) as ([ledger], account, lose):
        await ledger.update_config(team(), now=T0)
        before = await ledger.reserve("a", POOL, {TPM: 1000, TPD: 1000}, now=T0)
        assert isinstance(before, Grant)
        await lose()
        account.spent = Spent(T0, budgets={("a", POOL, TPD): 4500, ("b", POOL, TPD): 5000})
        after = await ledger.reserve("b", POOL, {TPM: 400, TPD: 400}, now=T0 + 1)
        assert isinstance(after, Grant)
        assert after.id != before.id  # the counter restarted, the epoch did not repeat
        assert ledger.rebuilds == 2
        assert await ledger.usage("a", POOL, TPD, now=T0 + 1) == 4500
        assert await ledger.usage("b", POOL, TPD, now=T0 + 1) == 5400
        # the stream reserved before the loss ends now: nothing to settle
        await ledger.reconcile(before, {TPM: 10, TPD: 10}, now=T0 + 2)
        assert ledger.foreign_settles == 1
        assert await ledger.usage("b", POOL, TPM, now=T0 + 2) == 400
        assert await ledger.usage("b", POOL, TPD, now=T0 + 2) == 5400
        assert await ledger.usage("a", POOL, TPD, now=T0 + 2) == 4500
        refused = await ledger.reserve("a", POOL, {TPD: 101}, now=T0 + 2)  # 100 left
        assert isinstance(refused, Refusal)


async def test_one_replica_rebuilds_and_the_others_wait_for_it(redis_url: str) -> None:
    async with ledgers(redis_url, count=4) as (replicas, account, _):
        account.delay = 0.3
        account.spent = Spent(T0, budgets={("a", POOL, TPD): 4000, ("b", POOL, TPD): 5000})
        results = await asyncio.gather(
            *(each.reserve("a", POOL, {TPD: 500}, now=T0) for each in replicas for _ in range(3))
        )
        assert account.reads == 1
        assert sum(each.rebuilds for each in replicas) == 1
        granted = [r for r in results if isinstance(r, Grant)]
        assert len(granted) == 2  # 9000 of org's 10,000 spent: two more of 500 fit
        assert await replicas[0].usage("a", POOL, TPD, now=T0) == 5000


async def test_calls_fail_closed_until_the_spend_can_be_read(redis_url: str) -> None:
    async with ledgers(redis_url) as ([ledger], account, _):
        account.fails = OSError("the database is down")
        for _ in range(3):
            with pytest.raises(LedgerUnavailableError):
                await ledger.reserve("a", POOL, {TPM: 10}, now=T0)
        assert await ledger.usage("a", POOL, TPM, now=T0) == 0  # nothing granted
        account.fails = None
        assert isinstance(await ledger.reserve("a", POOL, {TPM: 10}, now=T0), Grant)
        assert ledger.rebuilds == 1


async def test_the_redis_settings_a_ledger_needs_are_checked() -> None:
    with OwnedRedis() as plain:
        ledger = RedisLedger.from_url(plain.url, team())
        client: Redis = Redis.from_url(plain.url)
        try:
            warnings = await ledger.store_warnings()
            assert len(warnings) == 1 and "appendonly yes" in warnings[0]
            await client.config_set("maxmemory-policy", "allkeys-lru")
            warnings = await ledger.store_warnings()
            assert len(warnings) == 2 and "noeviction" in warnings[1]
            await client.config_set("appendonly", "yes")
            await client.config_set("maxmemory-policy", "noeviction")
            assert await ledger.store_warnings() == []
            # CONFIG renamed away or denied (managed Redis): not checked, no failure
            await client.acl_setuser(
                "default", enabled=True, nopass=True, commands=["+@all", "-config"]
            )
            assert await ledger.store_warnings() == []
        finally:
            await ledger.aclose()
            await client.aclose()
