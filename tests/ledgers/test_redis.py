"""What only the Redis ledger promises: one round trip per call, correctness when
replicas race, and keys that clean up after themselves."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.ledgers import Grant, RedisLedger
from quota.ledger import period_end
from tests.ledgers.configs import POOL, T0, TPD, TPM, team
from tests.support.redis import unique_prefix


async def test_each_call_is_one_round_trip(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client: Redis = Redis.from_url(redis_url, decode_responses=True)
    ledger = RedisLedger(client, team(), prefix=unique_prefix("trips"), owns_client=True)
    try:
        # The first call of each script may load it (NOSCRIPT, then EVAL-load): warm up.
        warm = await ledger.reserve("a", POOL, {TPM: 1}, now=T0)
        assert isinstance(warm, Grant)
        await ledger.reconcile(warm, {TPM: 1}, now=T0)
        sent: list[Any] = []
        execute: Any = client.execute_command  # redis-py leaves it untyped

        async def counting(*args: Any, **options: Any) -> Any:
            sent.append(args[0])
            return await execute(*args, **options)

        monkeypatch.setattr(client, "execute_command", counting)
        grant = await ledger.reserve("a", POOL, {TPM: 100, TPD: 100}, now=T0)
        refused = await ledger.reserve("a", POOL, {TPM: 5000}, now=T0)
        assert isinstance(grant, Grant) and not isinstance(refused, Grant)
        assert sent == ["EVALSHA", "EVALSHA"]
        await ledger.reconcile(grant, {TPM: 50}, now=T0 + 1)
        await ledger.release(grant, now=T0 + 2)
        assert sent == ["EVALSHA"] * 4
    finally:
        await ledger.aclose()


async def test_keys_share_one_hash_tag_and_go_when_done(redis_url: str) -> None:
    prefix = unique_prefix("keys")
    client: Redis = Redis.from_url(redis_url, decode_responses=True)
    ledger = RedisLedger(client, team(), prefix=prefix, owns_client=True)
    tag = "{" + prefix + "}"
    try:
        grant = await ledger.reserve("a", POOL, {TPM: 100, TPD: 100}, now=T0)
        assert isinstance(grant, Grant)
        midnight = int(period_end(TPD, T0))
        keys = {key async for key in client.scan_iter(match=f"{tag}*")}
        assert keys == {
            f"{tag}:seq",
            f"{tag}:res:{grant.id}",
            f"{tag}:fr:{POOL}|{TPM}",
            f"{tag}:exp:{POOL}|{TPM}",
            f"{tag}:fr:{POOL}|{TPD}@{midnight}",
        }
        for key in keys - {f"{tag}:seq"}:  # the id counter must outlive everything
            assert await client.ttl(key) > 0, key
        await ledger.reconcile(grant, {TPM: 10}, now=T0 + 1)
        assert not await client.exists(f"{tag}:res:{grant.id}")  # settled: no record kept
        assert await ledger.usage("a", POOL, TPM, now=T0 + 60) == 0
        # the rate's keys emptied and so vanished; this period's budget remains
        left = {key async for key in client.scan_iter(match=f"{tag}*")}
        assert left == {f"{tag}:seq", f"{tag}:fr:{POOL}|{TPD}@{midnight}"}
    finally:
        await ledger.aclose()


@pytest.mark.integration
async def test_racing_replicas_never_grant_more_than_the_quota(redis_url: str) -> None:
    """Eight replicas (each its own connection) hammer one small quota tree."""
    prefix = unique_prefix("race")
    replicas = [RedisLedger.from_url(redis_url, team(), prefix=prefix) for _ in range(8)]
    held = {"a": 0, "b": 0}  # what was granted, after reconciling
    refusals = 0
    done = asyncio.Event()

    async def caller(ledger: RedisLedger, rng: random.Random) -> None:
        nonlocal refusals
        for _ in range(150):
            queue = rng.choice("ab")
            estimate = rng.randrange(1, 120)
            result = await ledger.reserve(queue, POOL, {TPM: estimate}, now=T0)
            if not isinstance(result, Grant):
                refusals += 1
                continue
            used = estimate
            if rng.random() < 0.5:
                used = rng.randrange(0, estimate + 1)
                await ledger.reconcile(result, {TPM: used}, now=T0)
            held[queue] += used

    async def watcher(ledger: RedisLedger) -> int:
        samples = 0
        while not done.is_set():
            a, b, pool = [await ledger.usage(node, POOL, TPM, now=T0) for node in ("a", "b", "org")]
            # a: 1000 + what b lends (200); b: its 800 + the pool; the pool: 1200
            assert a <= 1200 and b <= 2000 and pool <= 1200, (a, b, pool)
            samples += 1
        return samples

    watching = asyncio.create_task(watcher(replicas[0]))
    try:
        await asyncio.gather(
            *(caller(ledger, random.Random(n)) for n, ledger in enumerate(replicas))
        )
        done.set()
        assert await watching > 0
        assert refusals > 0  # the quota really was contended
        for queue in ("a", "b"):
            assert await replicas[-1].usage(queue, POOL, TPM, now=T0) == held[queue]
        assert sum(held.values()) <= 2000
    finally:
        done.set()
        await asyncio.gather(watching, return_exceptions=True)
        for ledger in replicas:
            await ledger.aclose()
