"""The script batcher on a real Redis: one connection, writes that never wait for
earlier replies, and a connection that fails or goes away replaced by the next flush.
Every test runs on asyncio's own event loop and on uvloop (the gateway's): see
``conftest.py``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.ledgers.batching import LuaScript, ScriptBatcher
from tests.ledgers.wire import RoundTrips

# Busy for ARGV[1] microseconds (Redis runs one script at a time), then answers ARGV[2].
SLOW = LuaScript.of(
    "local t = redis.call('TIME') local start = t[1] * 1e6 + t[2] "
    "repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] - start >= tonumber(ARGV[1]) "
    "return ARGV[2]"
)
ECHO = LuaScript.of("return ARGV[1]")


@asynccontextmanager
async def _batcher(
    redis_url: str, **options: Any
) -> AsyncIterator[tuple[ScriptBatcher, Redis, Redis]]:
    """A batcher on a client whose connections carry a name of their own; also that
    client and a second one, to look at and kill the first one's connections."""
    name = f"batcher-{uuid.uuid4().hex[:12]}"
    client = Redis.from_url(redis_url, decode_responses=True, client_name=name, **options)
    admin = Redis.from_url(redis_url, decode_responses=True)
    batcher = ScriptBatcher(client, preload=(SLOW, ECHO))
    try:
        yield batcher, client, admin
    finally:
        await batcher.aclose()
        await client.aclose()
        await admin.aclose()


async def _connections_named(admin: Redis, name: str) -> list[str]:
    return [c["id"] for c in await admin.client_list() if c.get("name") == name]


async def test_a_write_does_not_wait_for_the_replies_before_it(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _batcher(redis_url) as (batcher, _, _admin):
        await batcher.call(ECHO, [], ["warm"])  # connected, scripts loaded
        sent = RoundTrips(monkeypatch)
        slow = batcher.call(SLOW, [], [200_000, "slow"])
        for _ in range(3):
            await asyncio.sleep(0)  # written
        fast = batcher.call(ECHO, [], ["fast"])
        for _ in range(3):
            await asyncio.sleep(0)
        assert not slow.done()  # Redis is still running the slow script...
        assert len(sent.trips) == 2  # ...and the second call is on the wire behind it
        assert len({trip.connection for trip in sent.trips}) == 1
        assert await fast == "fast"
        assert slow.done() and slow.result() == "slow"  # answered in order


async def test_a_connection_closed_while_idle_is_replaced_before_a_call_uses_it(
    redis_url: str,
) -> None:
    async with _batcher(redis_url) as (batcher, client, admin):
        assert await batcher.call(ECHO, [], ["one"]) == "one"
        name = client.get_connection_kwargs()["client_name"]
        (first,) = await _connections_named(admin, name)
        await admin.client_kill_filter(_id=first)
        await asyncio.sleep(0.05)  # the close reaches the client
        assert await batcher.call(ECHO, [], ["two"]) == "two"  # no call failed
        assert await _connections_named(admin, name) not in ([], [first])


class _Cuttable:
    """A TCP relay in front of Redis whose open connections can be cut at once."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.writers: list[asyncio.StreamWriter] = []
        self.accepted = 0

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    async def relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self.writers += [writer, up_writer]
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )

    def cut(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()


async def test_calls_on_a_connection_that_dies_fail_and_the_next_ones_work(
    redis_url: str,
) -> None:
    port = Redis.from_url(redis_url).get_connection_kwargs()["port"]
    relay = _Cuttable(port)
    server = await asyncio.start_server(relay.relay, "127.0.0.1", 0)
    url = f"redis://127.0.0.1:{server.sockets[0].getsockname()[1]}/0"
    async with server, _batcher(url) as (batcher, _client, admin):
        assert await batcher.call(ECHO, [], ["warm"]) == "warm"
        in_flight = [batcher.call(SLOW, [], [200_000, "slow"]), batcher.call(ECHO, [], ["x"])]
        await asyncio.sleep(0.05)  # both written, the slow one running
        relay.cut()
        results = await asyncio.gather(*in_flight, return_exceptions=True)
        assert all(isinstance(r, RedisConnectionError) for r in results), results
        await admin.script_flush()  # the new connection loads the scripts again
        assert await batcher.call(ECHO, [], ["after"]) == "after"
        assert relay.accepted == 3  # the batcher's two connections and the admin's


async def test_aclose_waits_for_calls_on_the_wire_and_gives_the_connection_back(
    redis_url: str,
) -> None:
    async with _batcher(redis_url) as (batcher, client, _admin):
        slow = batcher.call(SLOW, [], [100_000, "slow"])
        await batcher.aclose()
        assert slow.done() and slow.result() == "slow"
        pool = client.connection_pool
        assert pool._in_use_connections == set()  # private, but nothing public tells


async def test_the_connection_goes_back_to_the_pool_fit_for_other_commands(
    redis_url: str,
) -> None:
    """The batcher put its own protocol on the connection's transport: the pool must not
    hand that connection to anyone as it is."""
    async with _batcher(redis_url) as (batcher, client, _admin):
        assert await batcher.call(ECHO, [], ["mine"]) == "mine"
        await batcher.aclose()
        key = f"batched-{uuid.uuid4().hex[:12]}"
        assert await client.set(key, "v") and await client.get(key) == "v"
        await client.delete(key)
        assert await batcher.call(ECHO, [], ["again"]) == "again"  # a fresh link


async def test_no_reply_within_the_read_timeout_fails_the_waiting_calls_only(
    redis_url: str,
) -> None:
    async with _batcher(redis_url, socket_timeout=0.05) as (batcher, client, admin):
        name = client.get_connection_kwargs()["client_name"]
        assert await _echo_within_the_timeout(batcher, "warm") == "warm"
        first = await _the_one_connection_named(admin, name)
        late = batcher.call(SLOW, [], [200_000, "late"])
        with pytest.raises(RedisTimeoutError):
            await late
        await admin.ping()  # answered once Redis is done with the slow script
        # the next call rides a new connection
        assert await _echo_within_the_timeout(batcher, "next") == "next"
        assert first not in await _connections_named(admin, name)


async def _echo_within_the_timeout(batcher: ScriptBatcher, word: str) -> str:
    """ECHO on a batcher whose socket timeout is 0.05 s: a loaded machine may miss it
    with a call that is not slow at all, and each miss only costs that connection."""
    for _ in range(9):
        try:
            return await batcher.call(ECHO, [], [word])
        except RedisTimeoutError:
            await asyncio.sleep(0.1)
    return await batcher.call(ECHO, [], [word])


async def _the_one_connection_named(admin: Redis, name: str) -> str:
    """The batcher's connection, once those dropped after a timed-out call are gone."""
    deadline = asyncio.get_running_loop().time() + 5
    while len(found := await _connections_named(admin, name)) != 1:
        assert asyncio.get_running_loop().time() < deadline, found
        await asyncio.sleep(0.05)
    return found[0]


async def test_a_call_with_an_argument_redis_cannot_take_fails_alone(redis_url: str) -> None:
    async with _batcher(redis_url) as (batcher, _client, _admin):
        slow = batcher.call(SLOW, [], [100_000, "slow"])
        await asyncio.sleep(0.02)  # on the wire
        with pytest.raises(TypeError):
            await batcher.call(ECHO, [], [None])  # type: ignore[list-item]
        assert await slow == "slow"  # the call before it on the connection is unharmed
        assert await batcher.call(ECHO, [], ["next"]) == "next"
