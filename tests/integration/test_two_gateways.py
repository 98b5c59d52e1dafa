"""Two gateway processes on one PostgreSQL under concurrent load from several
tenants; the process running the admission loop is killed mid-run.

Holds: never more admitted than the quota tree allows (sampled throughout), no
workload lost or run twice, every workload reaches a final state, and the
surviving gateway takes the loop over within seconds.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.support.gateways import gateway_processes
from tests.support.postgres import create_database

pytestmark = pytest.mark.integration

ADMIN = "two-gateways-bootstrap-admin-key-0123456789"
TENANTS = ("acme", "globex", "initech")
PER_QUEUE_LIMIT = 6  # nominal 4 + borrowing limit 2
COHORT_LIMIT = 12  # three queues of nominal 4
WORKLOADS = 210  # seventy per tenant

CONFIG = {
    "flavors": ["h100"],
    "cohorts": [{"name": "org"}],
    "cluster_queues": [
        {
            "name": f"{t}-queue",
            "cohort": "org",
            "resource_groups": [
                {
                    "resources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "h100",
                            "quotas": {"nvidia.com/gpu": {"nominal": 4, "borrowing_limit": 2}},
                        }
                    ],
                }
            ],
        }
        for t in TENANTS
    ],
    "tenants": [{"name": t, "queues": [f"{t}-queue"]} for t in TENANTS],
}


@pytest.fixture
def gateways(
    postgres: str, tmp_path: Path
) -> Iterator[tuple[str, list[tuple[str, subprocess.Popen[bytes]]]]]:
    database = asyncio.run(create_database(postgres))
    env = {
        "DATABASE_URL": database,
        "IGNARA_ADMIN_KEY": ADMIN,
        "IGNARA_KEY_PEPPER": "two-gateways-pepper-0123456789",
        "IGNARA_LOCAL_BACKEND_ROOT": str(tmp_path / "jobs"),
        "IGNARA_LOG_LEVEL": "warning",
    }
    with gateway_processes(("a", "b"), env, tmp_path) as processes:
        yield database, processes


async def usage(connection: asyncpg.Connection) -> dict[str, int]:
    rows = await connection.fetch(
        "SELECT queue, admission FROM workloads WHERE state IN ('admitted', 'running')"
    )
    held: dict[str, int] = {}
    for row in rows:
        import json

        admission = (
            json.loads(row["admission"]) if isinstance(row["admission"], str) else row["admission"]
        )
        held[row["queue"]] = held.get(row["queue"], 0) + sum(
            p["count"] for p in admission["pod_sets"]
        )
    return held


async def leader(urls: list[str]) -> str | None:
    async with httpx.AsyncClient(timeout=2) as client:
        for url in urls:
            try:
                if (await client.get(f"{url}/readyz")).json().get("admission_leader"):
                    return url
            except httpx.HTTPError:
                continue
    return None


async def scenario(
    database: str, processes: list[tuple[str, subprocess.Popen[bytes]]], jobs: Path
) -> None:
    urls = [url for url, _ in processes]
    admin = {"Authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(timeout=30) as client:
        applied = await client.post(f"{urls[0]}/api/v1/admin/config", json=CONFIG, headers=admin)
        assert applied.status_code == 201, applied.text
        keys = {}
        for tenant in TENANTS:
            made = await client.post(
                f"{urls[1]}/api/v1/admin/tenants/{tenant}/keys",
                json={"principal": f"{tenant}-ci"},
                headers=admin,
            )
            keys[tenant] = made.json()["token"]
        # Each replica reloads policy data within about a second of a config change.
        for url in urls:
            for tenant in TENANTS:
                for _ in range(50):
                    probe = await client.get(
                        f"{url}/api/v1/workloads",
                        headers={"Authorization": f"Bearer {keys[tenant]}"},
                    )
                    if probe.status_code == 200:
                        break
                    await asyncio.sleep(0.1)
                assert probe.status_code == 200, probe.text
        # Each run says who it is in its own log (a sandboxed job reaches no other file).
        code = "echo $IGNARA_WORKLOAD_ID; sleep 0.3"

        async def submit(i: int) -> str:
            tenant = TENANTS[i % len(TENANTS)]
            response = await client.post(
                f"{urls[i % 2]}/api/v1/workloads",
                json={
                    "name": f"job-{i}",
                    "queue": f"{tenant}-queue",
                    "pod_sets": [
                        {"name": "workers", "count": 1 + i % 2, "requests": {"nvidia.com/gpu": 1}}
                    ],
                    "max_runtime_seconds": 60,
                    "job": {"command": ["/bin/sh", "-c", code]},
                },
                headers={"Authorization": f"Bearer {keys[tenant]}", "Idempotency-Key": f"job-{i}"},
            )
            assert response.status_code == 201, response.text
            workload_id: str = response.json()["id"]
            return workload_id

        ids = await asyncio.gather(*(submit(i) for i in range(WORKLOADS)))
    assert len(set(ids)) == WORKLOADS

    connection = await asyncpg.connect(database, timeout=10)
    killed = False
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            held = await usage(connection)
            assert all(v <= PER_QUEUE_LIMIT for v in held.values()), held
            assert sum(held.values()) <= COHORT_LIMIT, held
            final = await connection.fetchval(
                "SELECT count(*) FROM workloads WHERE state IN ('succeeded', 'failed', 'cancelled')"
            )
            if not killed and final >= WORKLOADS // 4:
                current = await leader(urls)
                assert current is not None
                victim = next(p for url, p in processes if url == current)
                victim.kill()  # SIGKILL: no clean shutdown, no lock release by the gateway
                survivor = next(url for url in urls if url != current)
                killed_at = time.monotonic()
                while await leader([survivor]) is None:
                    assert time.monotonic() - killed_at < 15, "no takeover within 15 s"
                    await asyncio.sleep(0.2)
                killed = True
            if final == WORKLOADS:
                break
            await asyncio.sleep(0.05)
        states = await connection.fetch("SELECT state, count(*) FROM workloads GROUP BY state")
        assert dict(states) == {"succeeded": WORKLOADS}, dict(states)
        attempts = await connection.fetchval("SELECT max(attempt) FROM workloads")
        assert attempts == 1  # nothing admitted twice
    finally:
        await connection.close()
    assert killed
    lines = [line for log in jobs.glob("*/output.log") for line in log.read_text().split()]
    assert len(lines) == WORKLOADS and len(set(lines)) == WORKLOADS  # each ran exactly once


def test_two_gateways_one_database_and_a_killed_leader(
    gateways: tuple[str, list[tuple[str, subprocess.Popen[bytes]]]], tmp_path: Path
) -> None:
    database, processes = gateways
    asyncio.run(scenario(database, processes, tmp_path / "jobs"))
