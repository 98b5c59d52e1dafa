"""After a randomized run of gangs on the local backend (some finishing, some failing,
some cancelled while they run), the three accounts of GPU-hours agree: what each run
really used (GPUs x its backend-reported runtime), what the chargeback ledger holds,
and what the quota tree counts as charged when the admission loop builds it."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.admission.snapshot import read_snapshot
from gateway.app import create_app
from gateway.settings import Settings
from quota.budgets import from_hours
from quota.periods import BudgetPeriod, day_slices, period_end, period_start
from quota.resources import FlavorResource
from tenants import Database
from tenants.services.charges import charged_hours
from tests.conftest import ADMIN_KEY
from tests.gateway.test_gpu_hour_budgets import CONFIG
from tests.gateway.test_workload_api import bearer, key_for

GPU_HOURS = "nvidia.com/gpu-hours"
FINAL = ("succeeded", "failed", "cancelled")


@pytest.fixture
def client(settings: Settings) -> Iterator[tuple[TestClient[Any], Settings]]:
    with TestClient(app=create_app(settings)) as client:
        admin = bearer(ADMIN_KEY)
        assert client.post("/api/v1/admin/config", json=CONFIG, headers=admin).status_code == 201
        yield client, settings


def job(name: str, queue: str, gpus: int, seconds: float, code: int) -> dict[str, Any]:
    script = f"import time, sys; time.sleep({seconds}); sys.exit({code})"
    return {
        "name": name,
        "queue": queue,
        "pod_sets": [{"name": "workers", "count": gpus, "requests": {"nvidia.com/gpu": 1}}],
        "max_runtime_seconds": 3600,
        "job": {"command": ["/usr/bin/python3", "-c", script]},
    }


@pytest.mark.parametrize("seed", [3, 11])
def test_ledger_tree_and_runtimes_agree(
    client: tuple[TestClient[Any], Settings], seed: int
) -> None:
    api, settings = client
    rng = random.Random(seed)
    keys = {"team-a": key_for(api, "alpha"), "team-b": key_for(api, "beta")}
    ids: dict[str, tuple[str, str]] = {}
    for i in range(8):
        queue = rng.choice(list(keys))
        body = job(f"g{i}", queue, rng.randint(1, 4), rng.uniform(0.3, 2.0), rng.choice((0, 0, 3)))
        made = api.post("/api/v1/workloads", json=body, headers=bearer(keys[queue]))
        assert made.status_code == 201, made.text
        ids[made.json()["id"]] = (queue, keys[queue])
    to_cancel = rng.sample(sorted(ids), 3)
    deadline = time.monotonic() + 60
    rows: dict[str, dict[str, Any]] = {}
    while len(rows) < len(ids) and time.monotonic() < deadline:
        for wid, (_, key) in ids.items():
            body = api.get(f"/api/v1/workloads/{wid}", headers=bearer(key)).json()
            if wid in to_cancel and body["state"] == "running":
                api.delete(f"/api/v1/workloads/{wid}", headers=bearer(key))
            if body["state"] in FINAL:
                rows[wid] = body
        time.sleep(0.1)
    assert len(rows) == len(ids), "every gang ends"

    # 1. What each run really used, cut by day and rounded as the ledger rounds.
    used: dict[str, Decimal] = {}
    for wid, body in rows.items():
        if body["started_at"] is None:
            continue  # never ran: nothing to charge
        gpus = sum(p["count"] for p in body["admission"]["pod_sets"])
        start = datetime.fromisoformat(body["started_at"])
        end = datetime.fromisoformat(body["finished_at"])
        for _, hours in day_slices(start, end):
            amount = Decimal(hours.numerator * gpus) / Decimal(hours.denominator)
            queue = ids[wid][0]
            used[queue] = used.get(queue, Decimal(0)) + amount.quantize(Decimal("0.000001"))
    assert used, "some gangs ran"

    # 2. What the ledger holds, and 3. what the tree counts, for this month.
    database = Database(settings.database.url)

    async def accounts() -> tuple[dict[tuple[str, str, str], Decimal], dict[str, Any]]:
        now = datetime.now(UTC)
        first, last = period_start(BudgetPeriod.MONTH, now), period_end(BudgetPeriod.MONTH, now)
        async with database.session() as session:
            ledger = await charged_hours(session, first, last)
        engine, _ = (await read_snapshot(database, now=now, charged=charged_hours)).engine()
        await database.dispose()
        return ledger, dict(engine.budgets())

    ledger, tree = asyncio.run(accounts())
    for queue, amount in used.items():
        on_ledger = ledger[(queue, "h100", GPU_HOURS)]
        # Each run's end is the gateway's moment of the change, a hair after finished_at.
        assert on_ledger == pytest.approx(amount, abs=Decimal("0.00001") * len(rows))
        charged, _ = tree[queue][FlavorResource("h100", GPU_HOURS)]
        assert charged == from_hours(Fraction(on_ledger))
    assert {q for (q, _, _) in ledger} == set(used)
