"""Every workload keeps its timeline: each event is written with the change it describes
(preempted and requeued with the preemption, lost and requeued when the backend no longer
knows the job, adopted when the backend already had it)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from gateway.admission import AdmissionRuntime
from gateway.admission.dispatcher import Dispatcher
from gateway.backends import JobSpec, JobState, JobStatus, LocalBackend
from gateway.settings import Settings
from tenants import Database, parse_config
from tenants.models import WorkloadEventRow, WorkloadRow
from tenants.services import apply_config
from tenants.services.workloads import cancel_workload, submit_workload
from tests.admission.test_runtime import CONFIG, job


class Forgetful:
    """A backend that runs nothing: its jobs run until told otherwise, and it can forget
    them (as Slurm does after MinJobAge or a lost state)."""

    name = "local"

    def __init__(self) -> None:
        self.jobs: dict[str, JobState] = {}
        self.submitted: list[str] = []

    async def submit(self, job: JobSpec) -> bool:
        if job.workload_id in self.jobs:
            return True
        self.submitted.append(job.workload_id)
        self.jobs[job.workload_id] = JobState.RUNNING
        return False

    async def cancel(self, workload_id: str) -> None:
        if workload_id in self.jobs:
            self.jobs[workload_id] = JobState.CANCELLED

    async def status(self, workload_id: str) -> JobStatus:
        state = self.jobs.get(workload_id, JobState.UNKNOWN)
        return JobStatus(state, exit_code=0 if state is JobState.SUCCEEDED else None)

    async def logs(self, workload_id: str, tail_bytes: int = 65536) -> bytes:
        return b""

    async def close(self) -> None:
        pass


async def configured(database: Database) -> None:
    async with database.session() as session:
        await apply_config(session, parse_config(CONFIG), actor="test")


async def submit(database: Database, name: str, code: str = "pass", **kw: Any) -> str:
    async with database.session() as session:
        row, _ = await submit_workload(session, "alpha", job(name, code, **kw), actor="test")
    return row.id


async def events(database: Database, workload_id: str) -> list[WorkloadEventRow]:
    async with database.session() as session:
        query = (
            select(WorkloadEventRow)
            .where(WorkloadEventRow.workload_id == workload_id)
            .order_by(WorkloadEventRow.id)  # type: ignore[arg-type]
        )
        return list((await session.exec(query)).all())


async def types(database: Database, workload_id: str) -> list[str]:
    return [e.type for e in await events(database, workload_id)]


async def state(database: Database, workload_id: str) -> WorkloadRow:
    async with database.session() as session:
        row = await session.get(WorkloadRow, workload_id)
    assert row is not None
    return row


@pytest.fixture
async def forgetful(database: Database) -> AsyncIterator[tuple[AdmissionRuntime, Forgetful]]:
    await configured(database)
    backend = Forgetful()
    runtime = AdmissionRuntime(database, {"local": backend}, interval=0.05)
    yield runtime, backend
    await runtime.stop()


async def test_a_job_the_backend_forgot_is_lost_and_requeued_not_failed(
    forgetful: tuple[AdmissionRuntime, Forgetful], database: Database
) -> None:
    runtime, backend = forgetful
    wid = await submit(database, "train")
    await runtime.step()  # admitted and dispatched
    await runtime.step()  # seen running
    assert (await state(database, wid)).state == "running"
    backend.jobs.clear()  # the backend lost its state
    await runtime.step()  # lost -> pending, not failed
    row = await state(database, wid)
    assert (row.state, row.reason_code, row.job_id) == ("pending", "Lost", None)
    await runtime.step()  # re-admitted, dispatched as a new attempt
    row = await state(database, wid)
    assert (row.state, row.attempt, row.job_id) == ("running", 2, f"{wid}-2")
    assert backend.submitted == [f"{wid}-1", f"{wid}-2"]
    backend.jobs[f"{wid}-2"] = JobState.SUCCEEDED
    await runtime.step()
    assert (await state(database, wid)).state == "succeeded"
    timeline = await events(database, wid)
    assert [(e.type, e.attempt) for e in timeline] == [
        ("submitted", 0),
        ("admitted", 1),
        ("dispatched", 1),
        ("running", 1),
        ("lost", 1),
        ("requeued", 1),
        ("admitted", 2),
        ("dispatched", 2),
        ("finished", 2),
    ]
    lost = timeline[4].detail
    assert (lost["backend"], lost["job"]) == ("local", f"{wid}-1")
    assert timeline[-1].detail["exit_code"] == 0


async def test_a_job_already_on_the_backend_is_adopted_not_submitted_again(
    forgetful: tuple[AdmissionRuntime, Forgetful], database: Database
) -> None:
    runtime, backend = forgetful
    wid = await submit(database, "train")
    # A gateway that crashed after submitting, before noting it: the job is there.
    backend.jobs[f"{wid}-1"] = JobState.RUNNING
    await runtime.step()
    row = await state(database, wid)
    assert (row.state, row.job_id, backend.submitted) == ("running", f"{wid}-1", [])
    assert await types(database, wid) == ["submitted", "admitted", "adopted"]


async def test_preemption_is_told_with_who_and_why_then_the_requeue(
    database: Database, tmp_path: Path
) -> None:
    await configured(database)
    backend = LocalBackend(tmp_path / "jobs", grace_seconds=1.0)
    runtime = AdmissionRuntime(database, {"local": backend}, interval=0.05)
    try:
        low = await submit(database, "low", "import time; time.sleep(60)", gpus=2)
        for _ in range(200):
            await runtime.step()
            if "running" in await types(database, low):
                break
            await asyncio.sleep(0.05)
        urgent = await submit(database, "urgent", "pass", gpus=2, priority=10)
        for _ in range(400):
            await runtime.step()
            if (await state(database, urgent)).state == "succeeded":
                break
            await asyncio.sleep(0.05)
        await runtime.step()
        timeline = await events(database, low)
        assert [e.type for e in timeline][:6] == [
            "submitted",
            "admitted",
            "dispatched",
            "running",
            "preempted",
            "requeued",
        ]
        preempted = timeline[4].detail
        assert (preempted["by"], preempted["reason"]) == (urgent, "InClusterQueue")
        seen = await types(database, urgent)
        # "running" only if a pass saw it run: a job this short may end between passes.
        assert [t for t in seen if t != "running"] == [
            "submitted",
            "admitted",
            "dispatched",
            "finished",
        ]
    finally:
        await runtime.stop()
        for attempt in (1, 2, 3):
            await backend.cancel(f"{low}-{attempt}")
        await backend.close()


async def test_preempted_before_its_job_was_submitted_it_is_requeued_at_once(
    forgetful: tuple[AdmissionRuntime, Forgetful], database: Database
) -> None:
    runtime, backend = forgetful
    low = await submit(database, "low", gpus=2)
    await runtime.loop.run_pass()  # admitted; no dispatcher pass yet
    urgent = await submit(database, "urgent", gpus=2, priority=10)
    await runtime.loop.run_pass()
    assert await types(database, low) == ["submitted", "admitted", "preempted", "requeued"]
    assert (await events(database, low))[2].detail["by"] == urgent
    assert backend.submitted == []


class Stubborn(Forgetful):
    """A backend whose jobs take their time to stop: cancelled, they run on until
    :meth:`let_go`."""

    def __init__(self) -> None:
        super().__init__()
        self.stopping: set[str] = set()

    async def cancel(self, workload_id: str) -> None:
        if self.jobs.get(workload_id) is JobState.RUNNING:
            self.stopping.add(workload_id)

    def let_go(self) -> None:
        for workload_id in self.stopping:
            self.jobs[workload_id] = JobState.CANCELLED


async def test_a_preempted_workload_cancelled_while_its_job_stops_ends_once_it_has(
    database: Database,
) -> None:
    await configured(database)
    backend = Stubborn()
    runtime = AdmissionRuntime(database, {"local": backend}, interval=0.05)
    try:
        low = await submit(database, "low", gpus=2)
        await runtime.step()
        await runtime.step()  # running on the backend
        await submit(database, "urgent", gpus=2, priority=10)
        await runtime.step()  # low preempted: pending, its job told to stop
        assert (await state(database, low)).job_id is not None
        async with database.session() as session:
            await cancel_workload(session, "alpha", low, actor="someone")
        for _ in range(3):
            await runtime.step()
        # Not cancelled while its job still runs: cancelled, nobody would stop it.
        row = await state(database, low)
        assert (row.state, row.cancel_requested) == ("pending", True)
        backend.let_go()
        await runtime.step()
        row = await state(database, low)
        assert (row.state, row.reason_code) == ("cancelled", "Cancelled")
        assert (await types(database, low))[-2:] == ["preempted", "cancelled"]
    finally:
        await runtime.stop()


@pytest.mark.parametrize("limit", [1, 2, 3])
async def test_a_workload_lost_max_lost_runs_times_fails_instead_of_running_again(
    database: Database, limit: int
) -> None:
    await configured(database)
    backend = Forgetful()
    runtime = AdmissionRuntime(database, {"local": backend}, interval=0.05, max_lost_runs=limit)
    try:
        wid = await submit(database, "crashes-its-backend")
        for attempt in range(1, limit + 1):
            await runtime.step()  # admitted and dispatched (again)
            await runtime.step()  # seen running
            row = await state(database, wid)
            assert (row.state, row.attempt) == ("running", attempt)
            backend.jobs.clear()  # the job took the backend's state with it
            await runtime.step()
        row = await state(database, wid)
        assert (row.state, row.reason_code) == ("failed", "LostTooOften"), row.reason_message
        assert row.reason_message is not None
        assert f"lost {limit} times" in row.reason_message
        assert row.finished_at is not None
        # Not run again, and its quota is free: another workload is admitted and runs.
        other = await submit(database, "next")
        await runtime.step()
        await runtime.step()
        assert (await state(database, other)).state == "running"
        assert backend.submitted == [f"{wid}-{n}" for n in range(1, limit + 1)] + [f"{other}-1"]
        timeline = [(e.type, e.attempt) for e in await events(database, wid)]
        assert timeline.count(("lost", limit)) == 1
        assert timeline[-2:] == [("lost", limit), ("failed", limit)]
        assert [t for t, _ in timeline].count("requeued") == limit - 1
    finally:
        await runtime.stop()


def test_a_dispatcher_needs_at_least_one_run() -> None:
    with pytest.raises(ValueError, match="max_lost_runs must be at least 1"):
        Dispatcher(Database("sqlite+aiosqlite://"), {}, max_lost_runs=0)


def test_max_lost_runs_defaults_to_five_and_reads_the_environment() -> None:
    assert Settings.from_env({}).admission.max_lost_runs == 5
    assert Settings.from_env({"IGNARA_MAX_LOST_RUNS": "2"}).admission.max_lost_runs == 2
    for bad in ("0", "-1", "two"):
        with pytest.raises(ValueError, match="IGNARA_MAX_LOST_RUNS must be a positive whole"):
            Settings.from_env({"IGNARA_MAX_LOST_RUNS": bad})


async def test_a_pass_reads_its_rows_a_batch_at_a_time_and_misses_none(
    forgetful: tuple[AdmissionRuntime, Forgetful], database: Database
) -> None:
    """A dispatch pass holds one batch of rows at a time (``PASS_BATCH``, not every
    running workload of the platform); the rows past the first batch go in the same
    pass."""
    runtime, backend = forgetful
    runtime.dispatcher.batch = 1
    ids = [await submit(database, f"train-{i}") for i in range(3)]
    await runtime.step()  # two admitted (the queue's 2 GPUs), both started in this pass
    assert len(backend.submitted) == 2
    states = [(await state(database, wid)).state for wid in ids]
    assert sorted(states) == ["pending", "running", "running"]
    for job_id in backend.submitted:
        backend.jobs[job_id] = JobState.SUCCEEDED
    await runtime.step()  # both seen finished in one pass, their quota freed
    await runtime.step()  # the third admitted and started
    assert [(await state(database, wid)).state for wid in ids].count("succeeded") == 2
    assert len(backend.submitted) == 3


def test_a_batch_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="batch must be at least 1"):
        Dispatcher(Database("sqlite:///:memory:"), {}, batch=0)
