"""Leases: the reservations of a gateway whose lease expired are reclaimed by another,
open ones settled at the tokens last checkpointed, settled-but-unrecorded ones as they
were settled; each exactly once, and dropped once recorded (forget)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast

from redis.asyncio import Redis

from gateway.ledgers import Grant, RedisLedger
from gateway.usage import UsageRecord, UsageRecorder
from gateway.usage.reclaim import BROKEN, Reclaimer
from tests.ledgers.configs import POOL, RPM, T0, TPD, TPM, team
from tests.support.redis import unique_prefix

LEASE = 0.3  # seconds


@asynccontextmanager
async def two_gateways(redis_url: str) -> AsyncIterator[tuple[RedisLedger, RedisLedger, Redis]]:
    prefix = unique_prefix("lease")
    dead, alive = (RedisLedger.from_url(redis_url, team(), prefix=prefix) for _ in range(2))
    client: Redis = Redis.from_url(redis_url, decode_responses=True)
    try:
        await dead.update_config(team(), now=T0)
        await alive.update_config(team(), now=T0)
        for ledger in (dead, alive):
            await ledger.renew_lease(LEASE)
        yield dead, alive, client
    finally:
        for ledger in (dead, alive):
            await ledger.aclose()
        await client.aclose()


async def _reserve(ledger: RedisLedger, tokens: int, note: str = '{"prompt": 10}') -> Grant:
    grant = await ledger.reserve("a", POOL, {TPM: tokens, RPM: 1, TPD: tokens}, now=T0, note=note)
    assert isinstance(grant, Grant)
    return grant


async def _checkpointed(client: Redis, ledger: RedisLedger, grant: Grant, tokens: int) -> None:
    ledger.checkpoint(grant, tokens)  # fire and forget: wait until it landed
    tag = "{" + ledger._tag.strip("{}") + "}"
    for _ in range(100):
        if await client.hget(f"{tag}:res:{grant.id}", "t") == str(tokens):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the checkpoint never landed")


async def test_a_dead_gateways_open_calls_are_settled_once_at_their_checkpoint(
    redis_url: str,
) -> None:
    async with two_gateways(redis_url) as (dead, alive, client):
        streaming = await _reserve(dead, 800)
        quiet = await _reserve(dead, 300)  # never checkpointed
        mine = await _reserve(alive, 100)
        await _checkpointed(client, dead, streaming, 120)
        assert await alive.reclaim() == []  # its lease still holds
        await asyncio.sleep(LEASE * 2)  # dead stops renewing; alive renews
        await alive.renew_lease(LEASE)
        orphans = {o.id: o for o in await alive.reclaim()}
        assert set(orphans) == {streaming.id, quiet.id}  # never alive's own
        assert orphans[streaming.id].checkpoint == 120
        assert orphans[quiet.id].checkpoint is None and orphans[quiet.id].settled is None
        assert orphans[quiet.id].note == '{"prompt": 10}'
        assert await alive.settle_orphan(orphans[streaming.id], 120, now=T0)
        assert await alive.settle_orphan(orphans[quiet.id], 10, now=T0)
        assert not await alive.settle_orphan(orphans[quiet.id], 10, now=T0)  # once only
        assert await alive.usage("a", POOL, TPD, now=T0) == 120 + 10 + 100
        assert await alive.usage("a", POOL, TPM, now=T0) == 120 + 10 + 100
        # the dead gateway's own settle, had it come back, changes nothing now
        await dead.reconcile(streaming, {TPM: 0, RPM: 0, TPD: 0}, now=T0)
        assert await alive.usage("a", POOL, TPD, now=T0) == 230
        # settled, waiting to be recorded: seen again until forgotten
        again = {o.id: o for o in await alive.reclaim()}
        assert again[streaming.id].settled == 120 and again[quiet.id].settled == 10
        await alive.forget(list(again))
        assert await alive.reclaim() == []
        await alive.reconcile(mine, {TPM: 50, RPM: 1, TPD: 50}, now=T0)
        assert await alive.usage("a", POOL, TPD, now=T0) == 180


async def test_a_settled_call_survives_until_recorded_then_goes(redis_url: str) -> None:
    async with two_gateways(redis_url) as (dead, alive, client):
        grant = await _reserve(dead, 500)
        await dead.reconcile(grant, {TPM: 70, RPM: 1, TPD: 70}, now=T0)
        tag = "{" + dead._tag.strip("{}") + "}"
        assert await client.hget(f"{tag}:res:{grant.id}", "d") == "1"  # kept: not recorded
        recorded = await _reserve(dead, 500)
        await dead.reconcile(recorded, {TPM: 30, RPM: 1, TPD: 30}, now=T0)
        await dead.forget([recorded.id])  # its record was written
        assert not await client.exists(f"{tag}:res:{recorded.id}")
        await asyncio.sleep(LEASE * 2)
        await alive.renew_lease(LEASE)
        orphans = await alive.reclaim()
        assert [(o.id, o.settled) for o in orphans] == [(grant.id, 70)]
        assert not await alive.settle_orphan(orphans[0], 70, now=T0)  # settled already
        assert await alive.usage("a", POOL, TPD, now=T0) == 100
        await alive.forget([grant.id])
        assert await alive.reclaim() == []
        assert not await client.exists(f"{tag}:open:{dead.owner}")


async def test_calls_without_a_note_leave_nothing_behind(redis_url: str) -> None:
    async with two_gateways(redis_url) as (dead, alive, client):
        grant = await dead.reserve("a", POOL, {TPM: 10}, now=T0)
        assert isinstance(grant, Grant)
        await dead.reconcile(grant, {TPM: 5}, now=T0)
        tag = "{" + dead._tag.strip("{}") + "}"
        assert not await client.exists(f"{tag}:res:{grant.id}")
        await dead.drop_lease()
        assert await alive.reclaim() == []


class Records:
    """A stand-in for the usage recorder: what was queued for writing."""

    def __init__(self) -> None:
        self.queued: list[UsageRecord] = []

    def record(self, record: UsageRecord) -> None:
        self.queued.append(record)


async def test_a_reclaim_round_settles_and_records_each_call_once(redis_url: str) -> None:
    async with two_gateways(redis_url) as (dead, alive, client):
        note = '{"tenant": "acme", "principal": "bot", "key": "k1", "model": "m", "prompt": 7}'
        grants = [await _reserve(dead, 200, note) for _ in range(5)]
        await _checkpointed(client, dead, grants[0], 90)
        await dead.reconcile(grants[1], {TPM: 30, RPM: 1, TPD: 30}, now=T0)  # not recorded
        await asyncio.sleep(LEASE * 2)
        records = Records()
        reclaimer = Reclaimer(alive, cast(UsageRecorder, records), LEASE, batch=2)
        await reclaimer.renew()
        await reclaimer.round()
        await reclaimer.round()  # nothing was written yet: nothing is queued twice
        queued = {r.reservation: r for r in records.queued}
        assert len(records.queued) == 5 and set(queued) == {g.id for g in grants}
        assert all(
            r.estimated and r.tenant == "acme" and r.api_key_id == "k1" for r in queued.values()
        )
        first, settled = queued[grants[0].id], queued[grants[1].id]
        assert (first.prompt_tokens, first.completion_tokens, first.status) == (7, 83, BROKEN)
        assert (settled.prompt_tokens + settled.completion_tokens, settled.status) == (30, 200)
        assert all(queued[g.id].prompt_tokens == 7 for g in grants[2:])  # never checkpointed
        await alive.forget([g.id for g in grants])  # written
        assert await alive.reclaim() == []
