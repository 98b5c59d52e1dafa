"""The fault harness itself: a test's own Redis dies, freezes and comes back empty; its
own PostgreSQL stops and starts."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
import redis

from tests.support.faults import OwnedPostgres, OwnedRedis

pytestmark = pytest.mark.integration


def test_an_owned_redis_can_be_killed_frozen_and_restarted_empty() -> None:
    with OwnedRedis() as server:
        client = redis.Redis.from_url(server.url, socket_timeout=0.3)
        client.set("k", "v")
        server.freeze()
        with pytest.raises(redis.TimeoutError):
            client.get("k")
        server.thaw()
        client = redis.Redis.from_url(server.url, socket_timeout=1)
        assert client.get("k") == b"v"
        server.restart_empty()
        assert redis.Redis.from_url(server.url).get("k") is None


def test_an_owned_postgres_can_be_stopped_and_started() -> None:
    with OwnedPostgres() as server:
        url = server.database_url("faults")

        async def one() -> int:
            connection = await asyncpg.connect(url, timeout=5)
            try:
                return int(await connection.fetchval("SELECT 1"))
            finally:
                await connection.close()

        assert asyncio.run(one()) == 1
        server.stop()
        with pytest.raises(OSError):
            asyncio.run(one())
        server.start()
        assert asyncio.run(one()) == 1
