"""The chargeback ledger's GPU-hours: a run is charged what it used when it ends, by
whatever ends it (finished, failed, cancelled while running, preempted, lost), per UTC
day, in the transaction of the change that ends it; once, however often it is written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from sqlmodel import select

from gateway.admission import AdmissionRuntime
from gateway.backends import JobSpec, JobState, JobStatus
from tenants import Database, parse_config
from tenants.models import ChargeRow, WorkloadRow
from tenants.services import apply_config
from tenants.services.charges import (
    charge_ended_run,
    charged_hours,
    insert_charges,
    round_amount,
    run_charges,
)
from tenants.services.workloads import (
    PodSetRequest,
    WorkloadSubmission,
    cancel_workload,
    submit_workload,
)

GPU_HOURS = "nvidia.com/gpu-hours"

CONFIG = {
    "flavors": ["h100"],
    "cohorts": [{"name": "org"}, {"name": "research", "parent": "org"}],
    "cluster_queues": [
        {
            "name": "team-a",
            "cohort": "research",
            "preemption": {"within_cluster_queue": "LowerPriority"},
            "resource_groups": [
                {
                    "resources": ["nvidia.com/gpu", "cpu", "cpu-hours"],
                    "flavors": [
                        {
                            "name": "h100",
                            "quotas": {
                                "nvidia.com/gpu": {"nominal": 8},
                                "cpu": {"nominal": 64},
                                "cpu-hours": {"nominal": 100000},
                            },
                        }
                    ],
                }
            ],
        }
    ],
    "tenants": [{"name": "alpha", "queues": ["team-a"]}],
}


def admitted(pods: int, flavor: str = "h100") -> dict[str, Any]:
    flavors = {"nvidia.com/gpu": flavor, "cpu": flavor, "memory": flavor}
    return {
        "cluster_queue": "team-a",
        "pod_sets": [{"name": "w", "count": pods, "flavors": flavors}],
    }


SPEC = {
    "pod_sets": [{"name": "w", "count": 4, "requests": {"nvidia.com/gpu": "2", "memory": "1Gi"}}]
}


# --- the arithmetic -------------------------------------------------------------------------


def test_a_run_is_charged_per_utc_day_its_pods_times_its_requests() -> None:
    start = datetime(2026, 11, 3, 22, 0, tzinfo=UTC)
    end = datetime(2026, 11, 4, 2, 30, tzinfo=UTC)
    charges = run_charges(SPEC, admitted(3), {"nvidia.com/gpu"}, start, end)
    # 3 pods as admitted (of 4 asked) x 2 GPUs: 6 GPUs for 2 h, then for 2.5 h.
    assert charges == {
        ("h100", GPU_HOURS, date(2026, 11, 3)): Decimal("12"),
        ("h100", GPU_HOURS, date(2026, 11, 4)): Decimal("15"),
    }
    assert run_charges(SPEC, admitted(3), {"nvidia.com/gpu"}, end, start) == {}  # never ran


def test_amounts_are_rounded_half_up_to_six_decimals() -> None:
    assert round_amount(Fraction(1, 3600)) == Decimal("0.000278")
    assert round_amount(Fraction(1, 2_000_000)) == Decimal("0.000001")
    assert round_amount(Fraction(3, 2_000_000)) == Decimal("0.000002")
    assert round_amount(Fraction(1, 3_000_000)) == Decimal("0")
    one_second = datetime(2026, 11, 3, 12, tzinfo=UTC)
    charges = run_charges(
        SPEC, admitted(1), {"nvidia.com/gpu"}, one_second, one_second + timedelta(seconds=1)
    )
    assert charges == {("h100", GPU_HOURS, date(2026, 11, 3)): Decimal("0.000556")}


def test_milli_gpus_and_every_metered_resource_are_charged() -> None:
    spec = {
        "pod_sets": [{"name": "w", "count": 2, "requests": {"nvidia.com/gpu": "500m", "cpu": "4"}}]
    }
    start = datetime(2026, 11, 3, 10, tzinfo=UTC)
    charges = run_charges(
        spec, admitted(2), {"nvidia.com/gpu", "cpu"}, start, start + timedelta(hours=3)
    )
    assert charges == {
        ("h100", GPU_HOURS, date(2026, 11, 3)): Decimal("3"),
        ("h100", "cpu-hours", date(2026, 11, 3)): Decimal("24"),
    }
    # cpu is not metered where the queue has no cpu-hours budget.
    assert set(
        run_charges(spec, admitted(2), {"nvidia.com/gpu"}, start, start + timedelta(hours=3))
    ) == {("h100", GPU_HOURS, date(2026, 11, 3))}


# --- through the dispatcher and the admission loop ------------------------------------------


class Clocked:
    """A backend whose jobs run until told otherwise, and say they started at a time
    the test chooses (as a real backend reports its own start)."""

    name = "local"

    def __init__(self, started_at: datetime | None) -> None:
        self.started_at = started_at
        self.jobs: dict[str, JobState] = {}

    async def submit(self, job: JobSpec) -> bool:
        self.jobs.setdefault(job.workload_id, JobState.RUNNING)
        return False

    async def cancel(self, workload_id: str) -> None:
        if workload_id in self.jobs:
            self.jobs[workload_id] = JobState.CANCELLED

    async def status(self, workload_id: str) -> JobStatus:
        state = self.jobs.get(workload_id, JobState.UNKNOWN)
        started = self.started_at if state is not JobState.UNKNOWN else None
        return JobStatus(state, exit_code=0 if state.is_final else None, started_at=started)

    async def logs(self, workload_id: str, tail_bytes: int = 65536) -> bytes:
        return b""

    async def close(self) -> None:
        pass


def _midnight(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


@pytest.fixture
async def backend(database: Database) -> AsyncIterator[Clocked]:
    async with database.session() as session:
        await apply_config(session, parse_config(CONFIG), actor="test")
    # An hour before the last midnight (read now, not at import: a run of the suite may
    # pass midnight): every run here spans at least two UTC days.
    yield Clocked(_midnight(datetime.now(UTC)) - timedelta(hours=1))


@pytest.fixture
async def runtime(database: Database, backend: Clocked) -> AsyncIterator[AdmissionRuntime]:
    runtime = AdmissionRuntime(database, {"local": backend}, interval=0.05)
    yield runtime
    await runtime.stop()


def submission(name: str, *, gpus: int = 2, pods: int = 2, priority: int = 0) -> WorkloadSubmission:
    return WorkloadSubmission(
        name=name,
        queue="team-a",
        priority=priority,
        pod_sets=(PodSetRequest("main", pods, {"nvidia.com/gpu": str(gpus), "cpu": "1"}),),
        max_runtime_seconds=7200,
        command=("true",),
    )


async def submit(database: Database, what: WorkloadSubmission) -> str:
    async with database.session() as session:
        row, _ = await submit_workload(session, "alpha", what, actor="test")
    return row.id


async def workload(database: Database, wid: str) -> WorkloadRow:
    async with database.session() as session:
        row = await session.get(WorkloadRow, wid)
    assert row is not None
    return row


async def charges_of(database: Database, wid: str) -> list[ChargeRow]:
    async with database.session() as session:
        query = select(ChargeRow).where(ChargeRow.workload_id == wid)
        return sorted((await session.exec(query)).all(), key=lambda c: (c.resource, c.day))


def expected(
    started: datetime | None, gpus: int, cpus: int, ended: datetime, attempt: int = 1
) -> list[tuple[Any, ...]]:
    """What a run of ``gpus`` GPUs and ``cpus`` CPUs from ``started`` to ``ended`` is
    charged: its hours on each UTC day it spans."""
    assert started is not None
    days = []
    while started < ended:
        stop = min(ended, _midnight(started) + timedelta(days=1))
        hours = Fraction((stop - started) // timedelta(microseconds=1), 3_600_000_000)
        days.append((started.date(), hours))
        started = stop
    return [
        (resource, day, round_amount(count * hours), attempt)
        for resource, count in (("cpu-hours", cpus), (GPU_HOURS, gpus))
        for day, hours in days
    ]


def seen(charges: list[ChargeRow]) -> list[tuple[Any, ...]]:
    for charge in charges:
        assert (charge.tenant, charge.queue, charge.flavor) == ("alpha", "team-a", "h100")
        assert (charge.cohort_path, charge.model, charge.call_id) == ("org/research", None, None)
    return [(c.resource, c.day, c.amount, c.attempt) for c in charges]


async def test_a_finished_run_is_charged_from_its_backend_start_to_its_end(
    runtime: AdmissionRuntime, backend: Clocked, database: Database
) -> None:
    wid = await submit(database, submission("done"))
    await runtime.step()  # admitted, dispatched
    await runtime.step()  # seen running: its start noted
    assert await charges_of(database, wid) == []  # nothing until it ends
    backend.jobs[f"{wid}-1"] = JobState.SUCCEEDED
    await runtime.step()
    row = await workload(database, wid)
    assert row.state == "succeeded" and row.finished_at is not None
    assert seen(await charges_of(database, wid)) == expected(
        backend.started_at, 4, 2, row.finished_at
    )


async def test_a_failed_run_is_charged_too(
    runtime: AdmissionRuntime, backend: Clocked, database: Database
) -> None:
    wid = await submit(database, submission("broken", gpus=1, pods=1))
    await runtime.step()
    backend.jobs[f"{wid}-1"] = JobState.FAILED
    await runtime.step()  # its end is the first the dispatcher sees: the start comes with it
    row = await workload(database, wid)
    assert row.state == "failed" and row.finished_at is not None
    assert seen(await charges_of(database, wid)) == expected(
        backend.started_at, 1, 1, row.finished_at
    )


async def test_a_run_cancelled_while_running_is_charged_until_it_stopped(
    runtime: AdmissionRuntime, backend: Clocked, database: Database
) -> None:
    wid = await submit(database, submission("cancelled"))
    await runtime.step()
    await runtime.step()
    async with database.session() as session:
        await cancel_workload(session, "alpha", wid, actor="alpha")
    await runtime.step()
    row = await workload(database, wid)
    assert row.state == "cancelled" and row.finished_at is not None
    assert seen(await charges_of(database, wid)) == expected(
        backend.started_at, 4, 2, row.finished_at
    )


async def test_a_preempted_run_is_charged_until_its_quota_was_released(
    runtime: AdmissionRuntime, backend: Clocked, database: Database
) -> None:
    low = await submit(database, submission("low", gpus=4))
    await runtime.step()
    await runtime.step()
    assert (await workload(database, low)).state == "running"
    await submit(database, submission("urgent", gpus=4, priority=10))
    await runtime.step()  # low preempted; its job stopped
    await runtime.step()
    row = await workload(database, low)
    assert row.state == "pending" and row.job_id is None
    charges = await charges_of(database, low)
    assert seen(charges) == expected(backend.started_at, 8, 2, charges[0].at)
    assert len({c.at for c in charges}) == 1


async def test_a_lost_run_is_charged_until_it_was_found_lost_and_the_next_run_apart(
    runtime: AdmissionRuntime, backend: Clocked, database: Database
) -> None:
    wid = await submit(database, submission("lost", gpus=1, pods=1))
    await runtime.step()
    await runtime.step()
    backend.jobs.clear()  # the backend forgot it
    await runtime.step()
    first = await charges_of(database, wid)
    assert seen(first) == expected(backend.started_at, 1, 1, first[0].at)
    await runtime.step()  # runs again as attempt 2
    backend.jobs[f"{wid}-2"] = JobState.SUCCEEDED
    await runtime.step()
    row = await workload(database, wid)
    assert (row.state, row.attempt) == ("succeeded", 2)
    second = [c for c in await charges_of(database, wid) if c.attempt == 2]
    assert row.finished_at is not None
    assert seen(second) == expected(backend.started_at, 1, 1, row.finished_at, attempt=2)


async def test_a_run_that_never_started_is_charged_nothing(
    runtime: AdmissionRuntime, backend: Clocked, database: Database
) -> None:
    backend.started_at = None
    wid = await submit(database, submission("never"))
    await runtime.step()
    backend.jobs[f"{wid}-1"] = JobState.CANCELLED
    await runtime.step()
    assert (await workload(database, wid)).state == "cancelled"
    assert await charges_of(database, wid) == []


async def test_a_run_charged_twice_lands_once(
    runtime: AdmissionRuntime, backend: Clocked, database: Database
) -> None:
    wid = await submit(database, submission("twice", gpus=1, pods=1))
    await runtime.step()
    await runtime.step()
    running = await workload(database, wid)
    end = {"state": "succeeded", "finished_at": datetime.now(UTC)}
    for _ in range(2):  # two gateways, or a retry after a crash, charge the same end
        async with database.session() as session:
            await charge_ended_run(session, running, end, datetime.now(UTC))
    assert seen(await charges_of(database, wid)) == expected(
        backend.started_at, 1, 1, end["finished_at"]
    )


async def test_charged_hours_sums_the_days_of_a_period(database: Database) -> None:
    def charge(queue: str, resource: str, day: date, amount: str, **kw: Any) -> dict[str, Any]:
        return {
            "tenant": "alpha",
            "queue": queue,
            "cohort_path": "",
            "flavor": "h100",
            "resource": resource,
            "amount": Decimal(amount),
            "model": None,
            "workload_id": kw.get("workload_id"),
            "attempt": kw.get("attempt"),
            "call_id": kw.get("call_id"),
            "day": day,
            "at": datetime.now(UTC),
        }

    async with database.session() as session:
        await insert_charges(
            session,
            [
                charge("a", GPU_HOURS, date(2026, 10, 31), "5", workload_id="w0", attempt=1),
                charge("a", GPU_HOURS, date(2026, 11, 1), "1.000001", workload_id="w1", attempt=1),
                charge("a", GPU_HOURS, date(2026, 11, 30), "2.5", workload_id="w2", attempt=1),
                charge("a", GPU_HOURS, date(2026, 11, 30), "0.1", workload_id="w3", attempt=1),
                charge("b", GPU_HOURS, date(2026, 11, 15), "7", workload_id="w4", attempt=1),
                charge("a", GPU_HOURS, date(2026, 12, 1), "9", workload_id="w5", attempt=1),
                charge("a", "input-tokens", date(2026, 11, 2), "1000", call_id="c1"),
            ],
        )
    november = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
    async with database.session() as session:
        assert await charged_hours(session, *november) == {
            ("a", "h100", GPU_HOURS): Decimal("3.600001"),
            ("b", "h100", GPU_HOURS): Decimal("7"),
        }
        week = await charged_hours(
            session, datetime(2026, 11, 30, tzinfo=UTC), datetime(2026, 12, 7, tzinfo=UTC)
        )
        assert week == {("a", "h100", GPU_HOURS): Decimal("11.6")}
