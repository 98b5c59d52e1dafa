"""Faults the gateway already rides out, with real servers a test owns and hurts.

- Two gateways on one PostgreSQL; workloads submitted before, during and after a
  PostgreSQL restart, each retried with its Idempotency-Key until accepted (as a client
  would): none lost, none stored, admitted or run twice, every one runs to the end.
- Redis killed under two gateways: inference calls get JSON 503s at once (none hangs,
  none reaches the upstream), and calls succeed again shortly after Redis is back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.support.fake_openai import FakeOpenAI
from tests.support.faults import OwnedPostgres, OwnedRedis
from tests.support.gateways import gateway_processes
from tests.support.postgres import create_database

pytestmark = pytest.mark.integration

ADMIN = "fault-holds-bootstrap-admin-key-0123456789"
PEPPER = "fault-holds-pepper-0123456789"
FINAL = ("succeeded", "failed", "cancelled")

BATCH_CONFIG = {
    "flavors": ["h100"],
    "cluster_queues": [
        {
            "name": "batch",
            "resource_groups": [
                {
                    "resources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "h100", "quotas": {"nvidia.com/gpu": {"nominal": 8}}}],
                }
            ],
        }
    ],
    "tenants": [{"name": "acme", "queues": ["batch"]}],
}


def gateway_env(database_url: str, tmp_path: Path) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "IGNARA_ADMIN_KEY": ADMIN,
        "IGNARA_KEY_PEPPER": PEPPER,
        "IGNARA_LOCAL_BACKEND_ROOT": str(tmp_path / "jobs"),
        "IGNARA_LOG_LEVEL": "warning",
        "IGNARA_HEALTH_INTERVAL": "3600",
    }


async def configure(
    client: httpx.AsyncClient, urls: list[str], config: dict[str, Any], probe: str
) -> str:
    """Apply ``config`` on one gateway, make a key for tenant acme on the other, and
    wait until both accept it at ``probe`` (each reloads within about a second)."""
    admin = {"Authorization": f"Bearer {ADMIN}"}
    applied = await client.post(f"{urls[0]}/api/v1/admin/config", json=config, headers=admin)
    assert applied.status_code == 201, applied.text
    made = await client.post(
        f"{urls[1]}/api/v1/admin/tenants/acme/keys", json={"principal": "acme-ci"}, headers=admin
    )
    assert made.status_code == 201, made.text
    token: str = made.json()["token"]
    for url in urls:
        for _ in range(100):
            answer = await client.get(f"{url}{probe}", headers={"Authorization": f"Bearer {token}"})
            if answer.status_code == 200 and answer.json().get("data", True):
                break
            await asyncio.sleep(0.1)
        assert answer.status_code == 200, answer.text
    return token


# -- PostgreSQL restarted under two gateways ----------------------------------------------


@pytest.fixture
def owned_postgres() -> Iterator[OwnedPostgres]:
    with OwnedPostgres() as server:
        yield server


@pytest.fixture
def workload_gateways(owned_postgres: OwnedPostgres, tmp_path: Path) -> Iterator[list[str]]:
    env = gateway_env(owned_postgres.database_url("ignara"), tmp_path)
    with gateway_processes(("a", "b"), env, tmp_path) as processes:
        yield [url for url, _ in processes]
        for _, process in processes:
            assert process.poll() is None, "a gateway died during the test"


@dataclass
class Submitter:
    """Submits workload ``n`` under key ``job-n``, alternating gateways, retrying with
    the same key after a 5xx or a transport error until accepted."""

    client: httpx.AsyncClient
    urls: list[str]
    token: str
    deadline: float
    ids: dict[str, set[str]] = field(default_factory=dict)  # key -> ids answered
    first_try: dict[str, float] = field(default_factory=dict)

    async def submit(self, n: int) -> None:
        key = f"job-{n}"
        body = {
            "name": key,
            "queue": "batch",
            "pod_sets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}}],
            "max_runtime_seconds": 60,
            "job": {"command": ["/bin/sh", "-c", "echo $IGNARA_WORKLOAD_ID"]},
        }
        headers = {"Authorization": f"Bearer {self.token}", "Idempotency-Key": key}
        self.first_try[key] = time.monotonic()
        for attempt in range(10_000):
            url = self.urls[(n + attempt) % len(self.urls)]
            try:
                answer = await self.client.post(
                    f"{url}/api/v1/workloads", json=body, headers=headers
                )
            except httpx.TransportError:
                answer = None
            if answer is not None and answer.status_code in (200, 201):
                self.ids.setdefault(key, set()).add(answer.json()["id"])
                return
            if answer is not None:
                # The database is down, not the request wrong: never a 4xx.
                assert answer.status_code >= 500, (key, answer.status_code, answer.text)
            assert time.monotonic() < self.deadline, f"{key} was never accepted"
            await asyncio.sleep(0.2)


async def all_final(database_url: str, count: int, within: float) -> list[asyncpg.Record]:
    connection = await asyncpg.connect(database_url, timeout=10)
    try:
        deadline = time.monotonic() + within
        while True:
            rows = await connection.fetch(
                "SELECT id, idempotency_key, state, attempt FROM workloads WHERE tenant = 'acme'"
            )
            if len(rows) >= count and all(r["state"] in FINAL for r in rows):
                return list(rows)
            assert time.monotonic() < deadline, sorted((r["state"], r["attempt"]) for r in rows)
            await asyncio.sleep(0.2)
    finally:
        await connection.close()


async def restart_scenario(postgres: OwnedPostgres, urls: list[str], jobs: Path) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        token = await configure(client, urls, BATCH_CONFIG, "/api/v1/workloads")
        submitter = Submitter(client, urls, token, deadline=time.monotonic() + 45)
        await asyncio.gather(*(submitter.submit(n) for n in range(8)))  # before

        async def outage() -> tuple[float, float]:
            await asyncio.sleep(0.5)
            await asyncio.to_thread(postgres.stop, "fast")
            down = time.monotonic()
            with pytest.raises(OSError):  # really down
                await asyncpg.connect(postgres.server_url, timeout=2)
            await asyncio.sleep(2.5)
            up = time.monotonic()
            await asyncio.to_thread(postgres.start)
            return down, up

        async def trickle() -> None:  # across the whole outage
            running = []
            for n in range(8, 32):
                running.append(asyncio.create_task(submitter.submit(n)))
                await asyncio.sleep(0.2)
            await asyncio.gather(*running)

        (down, up), _ = await asyncio.gather(outage(), trickle())
        await asyncio.gather(*(submitter.submit(n) for n in range(32, 40)))  # after

    in_outage = [k for k, t in submitter.first_try.items() if down <= t < up]
    assert in_outage, "no submission was made while PostgreSQL was down"
    assert sorted(submitter.ids) == sorted(f"job-{n}" for n in range(40))
    assert all(len(ids) == 1 for ids in submitter.ids.values()), submitter.ids  # one per key
    accepted = {key: next(iter(ids)) for key, ids in submitter.ids.items()}

    rows = await all_final(postgres.database_url("ignara"), 40, within=60)
    assert {r["idempotency_key"]: r["id"] for r in rows} == accepted  # none lost or doubled
    assert len(rows) == 40
    assert {r["state"] for r in rows} == {"succeeded"}, [tuple(r) for r in rows]
    assert {r["attempt"] for r in rows} == {1}  # none admitted twice
    runs = sorted(p.name for p in jobs.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert runs == sorted(f"{wid}-1" for wid in accepted.values())  # one job each
    for run in runs:  # each ran once: one line of output, its own id
        assert (jobs / run / "output.log").read_text().split() == [run]


def test_workloads_survive_a_postgres_restart_under_two_gateways(
    owned_postgres: OwnedPostgres, workload_gateways: list[str], tmp_path: Path
) -> None:
    asyncio.run(restart_scenario(owned_postgres, workload_gateways, tmp_path / "jobs"))


# -- Redis killed under two gateways ------------------------------------------------------

# Generous for a loaded CI machine: a refusal that takes longer is a hang, not "fast".
ANSWER_WITHIN = 5.0
RECOVER_WITHIN = 10.0


def inference_config(upstream: str) -> dict[str, Any]:
    roomy = {"nominal": 10**9}
    return {
        "flavors": ["pool"],
        "cluster_queues": [
            {
                "name": "chat",
                "resource_groups": [
                    {
                        "resources": ["tokens-per-minute", "tokens-per-day"],
                        "flavors": [
                            {
                                "name": "pool",
                                "quotas": {"tokens-per-minute": roomy, "tokens-per-day": roomy},
                            }
                        ],
                    }
                ],
            }
        ],
        "tenants": [{"name": "acme", "queues": ["chat"]}],
        "models": [{"name": "fake-model", "flavor": "pool", "endpoints": [{"base_url": upstream}]}],
    }


@pytest.fixture
def owned_redis() -> Iterator[OwnedRedis]:
    with OwnedRedis() as server:
        yield server


@pytest.fixture
def inference_gateways(
    postgres: str, owned_redis: OwnedRedis, tmp_path: Path
) -> Iterator[list[str]]:
    env = gateway_env(asyncio.run(create_database(postgres)), tmp_path)
    env["REDIS_URL"] = owned_redis.url
    with gateway_processes(("a", "b"), env, tmp_path) as processes:
        yield [url for url, _ in processes]
        for _, process in processes:
            assert process.poll() is None, "a gateway died during the test"


async def chat(client: httpx.AsyncClient, url: str, token: str, stream: bool) -> httpx.Response:
    body = {
        "model": "fake-model",
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 5,
        "stream": stream,
    }
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with client.stream(
            "POST", f"{url}/v1/chat/completions", json=body, headers=headers
        ) as answer:
            await answer.aread()
    except httpx.TimeoutException:
        pytest.fail(f"{url}: no answer within {ANSWER_WITHIN}s: the call hangs")
    return answer


async def redis_kill_scenario(redis: OwnedRedis, urls: list[str]) -> None:
    async with (
        FakeOpenAI(models=("fake-model",)) as upstream,
        httpx.AsyncClient(timeout=ANSWER_WITHIN) as client,
    ):
        token = await configure(client, urls, inference_config(upstream.base_url), "/v1/models")
        cases = [(url, stream) for url in urls for stream in (False, True)]
        for url, stream in cases:
            assert (await chat(client, url, token, stream)).status_code == 200

        redis.kill()
        before = upstream.requests["/v1/chat/completions"]
        for _ in range(3):
            answers = await asyncio.gather(
                *(chat(client, url, token, stream) for url, stream in cases * 4)
            )
            for answer in answers:
                assert answer.status_code == 503, answer.text
                assert answer.headers["content-type"].startswith("application/json")
                error = answer.json()["error"]
                assert error["code"] == "ledger_unavailable", error
                assert isinstance(error["message"], str) and error["message"]
        # Fail closed: no call reached the model.
        assert upstream.requests["/v1/chat/completions"] == before

        await asyncio.to_thread(redis.start)  # empty, on the same port
        back = time.monotonic()
        for url, stream in cases:
            while (answer := await chat(client, url, token, stream)).status_code != 200:
                assert answer.status_code == 503, answer.text
                assert time.monotonic() - back < RECOVER_WITHIN, f"{url} did not recover"
                await asyncio.sleep(0.05)


def test_a_redis_kill_gives_json_503s_and_service_returns_with_redis(
    owned_redis: OwnedRedis, inference_gateways: list[str]
) -> None:
    asyncio.run(redis_kill_scenario(owned_redis, inference_gateways))
