"""A gateway SIGKILLed with streams in flight, next to a live one on the same Redis and
PostgreSQL. Today its reservations stay charged at their estimates for the rest of
the day (and month), and its calls' usage records are lost. Now the live gateway sees
its lease expire, settles its reservations at the tokens they last checkpointed (close
to what was really streamed), and records each call once, marked estimated."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from gateway.ledgers import RedisLedger
from quota.config import parse_quota_config
from tests.support.fake_openai import FakeOpenAI
from tests.support.faults import OwnedRedis
from tests.support.gateways import Process, gateway_processes
from tests.support.postgres import create_database

pytestmark = pytest.mark.integration

ADMIN = "fault-kill-bootstrap-admin-key-0123456789"
LEASE = 1.0  # seconds: IGNARA_LEASE_SECONDS
RECLAIM = 0.5  # seconds: IGNARA_RECLAIM_INTERVAL
STREAMS = 8
COMPLETION = 400  # tokens each stream would write: far more than it gets to
CHUNK_DELAY = 0.02  # seconds between the upstream's tokens
STREAMED_FOR = 1.5  # seconds the streams run before the kill
FLAVOR = "pool"
TPD = "tokens-per-day"


def _config(upstream: str) -> dict[str, Any]:
    return {
        "flavors": [FLAVOR],
        "cluster_queues": [
            {
                "name": "chat",
                "resource_groups": [
                    {
                        "resources": [TPD],
                        "flavors": [{"name": FLAVOR, "quotas": {TPD: {"nominal": 10**9}}}],
                    }
                ],
            }
        ],
        "tenants": [{"name": "acme", "queues": ["chat"]}],
        "models": [{"name": "fake-model", "flavor": FLAVOR, "endpoints": [{"base_url": upstream}]}],
    }


@pytest.fixture
def owned_redis() -> Iterator[OwnedRedis]:
    with OwnedRedis() as server:
        yield server


@pytest.fixture
def database(postgres: str) -> str:
    return asyncio.run(create_database(postgres))


@pytest.fixture
def gateways(
    database: str, owned_redis: OwnedRedis, tmp_path: Path
) -> Iterator[list[tuple[str, Process]]]:
    env = {
        "DATABASE_URL": database,
        "REDIS_URL": owned_redis.url,
        "IGNARA_ADMIN_KEY": ADMIN,
        "IGNARA_KEY_PEPPER": "fault-kill-pepper-0123456789",
        "IGNARA_LOCAL_BACKEND_ROOT": str(tmp_path / "jobs"),
        "IGNARA_LOG_LEVEL": "warning",
        "IGNARA_HEALTH_INTERVAL": "3600",
        "IGNARA_LEASE_SECONDS": str(LEASE),
        "IGNARA_RECLAIM_INTERVAL": str(RECLAIM),
    }
    with gateway_processes(("doomed", "survivor"), env, tmp_path) as processes:
        yield processes


async def _configure(client: httpx.AsyncClient, urls: list[str], upstream: str) -> str:
    admin = {"Authorization": f"Bearer {ADMIN}"}
    applied = await client.post(
        f"{urls[1]}/api/v1/admin/config", json=_config(upstream), headers=admin
    )
    assert applied.status_code == 201, applied.text
    made = await client.post(
        f"{urls[1]}/api/v1/admin/tenants/acme/keys", json={"principal": "acme-bot"}, headers=admin
    )
    assert made.status_code == 201, made.text
    token: str = made.json()["token"]
    for url in urls:  # each gateway reloads the config within about a second
        for _ in range(100):
            answer = await client.get(
                f"{url}/v1/models", headers={"Authorization": f"Bearer {token}"}
            )
            if answer.status_code == 200 and answer.json().get("data"):
                break
            await asyncio.sleep(0.1)
        assert answer.status_code == 200 and answer.json()["data"], answer.text
    return token


async def _stream(client: httpx.AsyncClient, url: str, token: str, received: list[int]) -> None:
    """One stream, counting the tokens (content events) it receives until it breaks."""
    body = {
        "model": "fake-model",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": COMPLETION,
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {token}"}
    slot = len(received)
    received.append(0)
    try:
        async with client.stream(
            "POST", f"{url}/v1/chat/completions", json=body, headers=headers
        ) as answer:
            assert answer.status_code == 200
            async for line in answer.aiter_lines():
                if '"content"' in line:
                    received[slot] += 1
    except httpx.HTTPError:
        pass  # the gateway died under it


async def _charged(ledger: RedisLedger) -> int:
    return await ledger.usage("chat", FLAVOR, TPD)


async def _records(database: str) -> list[asyncpg.Record]:
    connection = await asyncpg.connect(database, timeout=10)
    try:
        return list(
            await connection.fetch(
                "SELECT reservation, estimated, prompt_tokens, completion_tokens, status, tenant"
                " FROM usage_records WHERE queue = 'chat'"
            )
        )
    finally:
        await connection.close()


async def kill_scenario(
    processes: list[tuple[str, Process]], redis: OwnedRedis, database: str
) -> None:
    urls = [url for url, _ in processes]
    doomed = processes[0][1]
    quota = {k: v for k, v in _config("").items() if k in ("flavors", "cluster_queues")}
    ledger = RedisLedger.from_url(redis.url, parse_quota_config(quota), prefix="ignara")
    async with (
        FakeOpenAI(completion_tokens=COMPLETION) as upstream,
        httpx.AsyncClient(timeout=30) as client,
    ):
        upstream.chunk_delay = CHUNK_DELAY
        token = await _configure(client, urls, upstream.base_url)
        received: list[int] = []
        streams = [
            asyncio.create_task(_stream(client, urls[0], token, received)) for _ in range(STREAMS)
        ]
        await asyncio.sleep(STREAMED_FOR)
        estimates = await _charged(ledger)
        assert estimates >= STREAMS * COMPLETION  # each holds its estimate while it runs
        doomed.kill()  # SIGKILL: no drain, no settle, no record
        doomed.wait(timeout=10)
        killed = time.monotonic()
        await asyncio.gather(*streams)
        streamed = sum(received)
        assert 0 < streamed < STREAMS * COMPLETION

        # Within the lease and a reclaim round (and a generous margin for a loaded
        # machine), the survivor settles every reservation of the dead gateway and
        # records its call.
        deadline = killed + LEASE + RECLAIM + 8
        while len(records := await _records(database)) < STREAMS:
            assert time.monotonic() < deadline, (records, await _charged(ledger), streamed)
            await asyncio.sleep(0.1)
        # Charged close to what was really streamed: each stream's prompt estimate, plus
        # its tokens at the last checkpoint (at most a second, about 50 tokens, behind).
        charged = await _charged(ledger)
        assert abs(charged - streamed) <= STREAMS * 60, (charged, streamed)
        await asyncio.sleep(2 * RECLAIM)  # a later round records none of them again
        records = await _records(database)
        assert len(records) == STREAMS
        assert len({r["reservation"] for r in records}) == STREAMS
        assert all(r["estimated"] and r["tenant"] == "acme" for r in records)
        assert sum(r["prompt_tokens"] + r["completion_tokens"] for r in records) == charged
    await ledger.aclose()


def test_a_killed_gateways_streams_are_settled_and_recorded_by_a_survivor(
    gateways: list[tuple[str, Process]], owned_redis: OwnedRedis, database: str
) -> None:
    asyncio.run(kill_scenario(gateways, owned_redis, database))
