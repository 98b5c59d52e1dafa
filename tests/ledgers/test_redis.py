"""What only the Redis ledger promises: one round trip per call with few arguments
(shared by calls made together), correctness when replicas race, keys that clean up
after themselves, any number of concurrent calls on a bounded pool, reservations
nobody waits for given back, and LedgerUnavailableError for whatever goes wrong
with Redis."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import RedisError, ResponseError

from gateway.ledgers import Grant, LedgerUnavailableError, RedisLedger
from quota.ledger import period_end
from tests.ledgers.configs import MIDNIGHT, POOL, RPM, T0, TPD, TPM, team
from tests.ledgers.wire import RoundTrips
from tests.support.redis import unique_prefix


@asynccontextmanager
async def _own_ledger(redis_url: str, name: str) -> AsyncIterator[tuple[RedisLedger, Redis, str]]:
    """A ledger on ``team()`` with its own client and key prefix, closed after; also the
    client and the hash tag every key of that ledger carries."""
    prefix = unique_prefix(name)
    client: Redis = Redis.from_url(redis_url, decode_responses=True)
    ledger = RedisLedger(client, team(), prefix=prefix, owns_client=True)
    try:
        # as a ledger that rebuilt a fresh Redis leaves it (without a connection of its own)
        await client.set("{" + prefix + "}:epoch", "test")
        yield ledger, client, "{" + prefix + "}"
    finally:
        await ledger.aclose()


async def test_each_call_is_one_round_trip(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async with _own_ledger(redis_url, "trips") as (ledger, _, _tag):
        # The first round trip also loads the scripts: warm up.
        warm = await ledger.reserve("a", POOL, {TPM: 1}, now=T0)
        assert isinstance(warm, Grant)
        await ledger.reconcile(warm, {TPM: 1}, now=T0)
        sent = RoundTrips(monkeypatch)
        grant = await ledger.reserve("a", POOL, {TPM: 100, RPM: 1, TPD: 100}, now=T0)
        refused = await ledger.reserve("a", POOL, {TPM: 5000}, now=T0)
        assert isinstance(grant, Grant) and not isinstance(refused, Grant)
        assert sent.names() == [["EVALSHA"], ["EVALSHA"]]
        await ledger.reconcile(grant, {TPM: 50}, now=T0 + 1)
        await ledger.release(grant, now=T0 + 2)
        assert sent.names() == [["EVALSHA"]] * 4
        # EVALSHA, sha, key count; the counter's (or the record's) key and two keys per
        # resource; one argument for all that is static, now (and the grant's id), and
        # two arguments per resource (and a settle's owner)
        assert [len(trip.commands[0]) for trip in sent.trips] == [
            3 + 1 + 2 * 3 + 2 + 2 * 3,
            3 + 1 + 2 + 2 + 2,
            *[3 + 1 + 2 * 3 + 3 + 2 * 3 + 1] * 2,
        ]


async def test_calls_made_together_share_one_round_trip(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Concurrent calls ride one write, each still its own script run and answer."""
    async with _own_ledger(redis_url, "together") as (ledger, _, _tag):
        await ledger.usage("a", POOL, TPM, now=T0)  # the first round trip loads the scripts
        sent = RoundTrips(monkeypatch)
        # a's own 1000 plus the 200 b lends: 24 x 50 fit, the 25th and 26th do not
        results = await asyncio.gather(
            *(ledger.reserve("a", POOL, {TPM: 50}, now=T0) for _ in range(26))
        )
        granted = [r for r in results if isinstance(r, Grant)]
        assert len(granted) == 24
        assert len({grant.id for grant in granted}) == 24
        await asyncio.gather(*(ledger.release(grant, now=T0) for grant in granted))
        assert sent.names() == [["EVALSHA"] * 26, ["EVALSHA"] * 24]
        assert await ledger.usage("a", POOL, TPM, now=T0) == 0


async def test_scripts_are_loaded_first_and_again_when_redis_lost_them(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _own_ledger(redis_url, "noscript") as (ledger, client, _tag):
        await client.script_flush()  # as a fresh server has it
        sent = RoundTrips(monkeypatch)
        assert isinstance(await ledger.reserve("a", POOL, {TPM: 10}, now=T0), Grant)
        # all five scripts ride with the first call, so calls queued in order run in order
        assert sent.names() == [["SCRIPT LOAD"] * 5 + ["EVALSHA"]]
        await client.script_flush()  # as a restarted server would have it
        sent.trips.clear()
        assert isinstance(await ledger.reserve("a", POOL, {TPM: 10}, now=T0), Grant)
        # the lost call is sent again behind all five scripts
        assert sent.names() == [["EVALSHA"], ["SCRIPT LOAD"] * 5 + ["EVALSHA"]]
        assert await ledger.usage("a", POOL, TPM, now=T0) == 20  # the lost EVALSHA did not run


async def test_a_reservation_its_caller_abandoned_is_given_back(redis_url: str) -> None:
    async with _own_ledger(redis_url, "abandoned") as (ledger, client, tag):
        reserving = asyncio.create_task(ledger.reserve("a", POOL, {TPM: 300}, now=T0))
        await asyncio.sleep(0)  # the call is queued, its round trip about to start
        reserving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reserving
        for _ in range(100):  # the reply comes, and the release it causes
            granted = await client.get(f"{tag}:seq") is not None
            if granted and await ledger.usage("a", POOL, TPM, now=T0) == 0:
                break
            await asyncio.sleep(0.02)
        assert await client.get(f"{tag}:seq") == "1"  # it was granted...
        assert await ledger.usage("a", POOL, TPM, now=T0) == 0  # ...and given back


async def test_keys_share_one_hash_tag_and_go_when_done(redis_url: str) -> None:
    async with _own_ledger(redis_url, "keys") as (ledger, client, tag):
        grant = await ledger.reserve("a", POOL, {TPM: 100, TPD: 100}, now=T0)
        assert isinstance(grant, Grant)
        midnight = int(period_end(TPD, T0))
        keys = {key async for key in client.scan_iter(match=f"{tag}*")}
        assert keys == {
            f"{tag}:epoch",
            f"{tag}:seq",
            f"{tag}:res:{grant.id}",
            f"{tag}:fr:{POOL}|{TPM}",
            f"{tag}:exp:{POOL}|{TPM}",
            f"{tag}:fr:{POOL}|{TPD}@{midnight}",
        }
        # the id counter and the epoch must outlive everything
        for key in keys - {f"{tag}:seq", f"{tag}:epoch"}:
            assert await client.ttl(key) > 0, key
        await ledger.reconcile(grant, {TPM: 10}, now=T0 + 1)
        assert not await client.exists(f"{tag}:res:{grant.id}")  # settled: no record kept
        assert await ledger.usage("a", POOL, TPM, now=T0 + 60) == 0
        # the rate's keys emptied and so vanished; this period's budget remains
        left = {key async for key in client.scan_iter(match=f"{tag}*")}
        assert left == {f"{tag}:epoch", f"{tag}:seq", f"{tag}:fr:{POOL}|{TPD}@{midnight}"}


async def test_budget_keys_follow_period_end_to_the_microsecond(redis_url: str) -> None:
    """A path's budget keys are cached until just before the period ends; from then on
    each call asks quota.ledger.period_end, which rounds ``now`` to the microsecond."""
    async with _own_ledger(redis_url, "period") as (ledger, client, tag):
        for at in (0.0, MIDNIGHT - 0.002, MIDNIGHT - 1e-6, MIDNIGHT - 3e-7, MIDNIGHT, 1e5):
            grant = await ledger.reserve("a", POOL, {TPD: 1}, now=T0 + at)
            assert isinstance(grant, Grant)
            end = int(period_end(TPD, T0 + at))
            assert await client.hget(f"{tag}:fr:{POOL}|{TPD}@{end}", "u:q:a"), at


async def test_many_concurrent_calls_on_a_small_pool_all_succeed(redis_url: str) -> None:
    """600 calls in flight on a pool of 8 connections: they share one, none fails."""
    ledger = RedisLedger.from_url(
        redis_url, team(), prefix=unique_prefix("pool"), max_connections=8
    )

    async def call() -> None:
        grant = await ledger.reserve("a", POOL, {TPM: 2}, now=T0)
        assert isinstance(grant, Grant)
        await ledger.reconcile(grant, {TPM: 1}, now=T0)

    try:
        # One call first sets the new ledger's epoch: the test is about sharing a small
        # pool, not about 600 calls waiting out a first rebuild on a starved machine.
        await call()
        await asyncio.gather(*(call() for _ in range(599)))
        assert await ledger.usage("a", POOL, TPM, now=T0) == 600
    finally:
        await ledger.aclose()


def _grant() -> Grant:
    return Grant("1", "a", POOL, {TPM: 10}, {TPM: 0}, {TPM: 60.0})


async def _every_call(ledger: RedisLedger) -> list[tuple[str, LedgerUnavailableError]]:
    """Each method that talks to Redis, with the LedgerUnavailableError it raised."""
    calls: dict[str, Any] = {
        "reserve": lambda: ledger.reserve("a", POOL, {TPM: 1}, now=T0),
        "reconcile": lambda: ledger.reconcile(_grant(), {TPM: 5}, now=T0),
        "release": lambda: ledger.release(_grant(), now=T0),
        "usage": lambda: ledger.usage("a", POOL, TPM, now=T0),
        "update_config": lambda: ledger.update_config(team(), now=T0),
    }
    raised = []
    for name, call in calls.items():
        with pytest.raises(LedgerUnavailableError) as info:
            await call()
        raised.append((name, info.value))
    return raised


async def test_an_unreachable_redis_raises_ledger_unavailable() -> None:
    ledger = RedisLedger.from_url("redis://127.0.0.1:1/0", team(), socket_connect_timeout=0.5)
    try:
        for name, err in await _every_call(ledger):
            assert isinstance(err.__cause__, RedisError | OSError), name
    finally:
        await ledger.aclose()


async def test_a_failed_round_trip_fails_every_call_that_shared_it() -> None:
    ledger = RedisLedger.from_url("redis://127.0.0.1:1/0", team(), socket_connect_timeout=0.5)
    try:
        results = await asyncio.gather(
            *(ledger.reserve("a", POOL, {TPM: 1}, now=T0) for _ in range(5)),
            ledger.reconcile(_grant(), {TPM: 5}, now=T0),
            return_exceptions=True,
        )
        assert all(isinstance(r, LedgerUnavailableError) for r in results), results
    finally:
        await ledger.aclose()


async def test_a_redis_that_never_answers_raises_ledger_unavailable() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up and closes
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    ledger = RedisLedger.from_url(f"redis://127.0.0.1:{port}/0", team(), socket_timeout=0.1)
    try:
        async with server:
            for name, err in await _every_call(ledger):
                assert isinstance(err.__cause__, RedisError | TimeoutError), name
    finally:
        await ledger.aclose()


async def test_a_redis_that_answers_wrongly_raises_ledger_unavailable(redis_url: str) -> None:
    async with _own_ledger(redis_url, "wrong") as (ledger, client, tag):
        try:
            await client.rpush(f"{tag}:seq", "not a counter")
            with pytest.raises(LedgerUnavailableError) as info:
                await ledger.reserve("a", POOL, {TPM: 1}, now=T0)
            assert isinstance(info.value.__cause__, ResponseError)
        finally:
            await client.delete(f"{tag}:seq")


async def test_a_pool_that_stays_busy_raises_ledger_unavailable(redis_url: str) -> None:
    pool = BlockingConnectionPool.from_url(
        redis_url, max_connections=1, timeout=0.1, decode_responses=True
    )
    client = Redis.from_pool(pool)
    prefix = unique_prefix("busy")
    ledger = RedisLedger(client, team(), prefix=prefix, owns_client=True)
    other: Redis = Redis.from_url(redis_url)
    await other.set("{" + prefix + "}:epoch", "test")  # rebuilt, by another replica
    await other.aclose()
    try:

        async def hold_the_connection() -> None:  # for a list nobody pushes to
            await client.blpop([unique_prefix("nothing")], timeout=0.5)

        busy = asyncio.create_task(hold_the_connection())
        await asyncio.sleep(0.05)
        with pytest.raises(LedgerUnavailableError):
            await ledger.reserve("a", POOL, {TPM: 1}, now=T0)
        await busy
        assert isinstance(await ledger.reserve("a", POOL, {TPM: 1}, now=T0), Grant)
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
