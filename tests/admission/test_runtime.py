"""Admission plus dispatch against the real local backend: work runs, ends, frees
quota; cancel and preemption stop real processes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError
from sqlmodel import select

from gateway.admission import AdmissionRuntime
from gateway.backends import LocalBackend
from tenants import Database, parse_config
from tenants.models import WorkloadRow
from tenants.services import apply_config
from tenants.services.workloads import (
    PodSetRequest,
    WorkloadSubmission,
    cancel_workload,
    submit_workload,
)

CONFIG = {
    "flavors": ["h100"],
    "cluster_queues": [
        {
            "name": "team-a",
            "preemption": {"within_cluster_queue": "LowerPriority"},
            "resource_groups": [
                {
                    "resources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "h100", "quotas": {"nvidia.com/gpu": {"nominal": 2}}}],
                }
            ],
        }
    ],
    "tenants": [{"name": "alpha", "queues": ["team-a"]}],
}


def job(
    name: str, code: str, *, gpus: int = 1, priority: int = 0, runtime: int = 60
) -> WorkloadSubmission:
    return WorkloadSubmission(
        name=name,
        queue="team-a",
        priority=priority,
        pod_sets=(PodSetRequest("main", gpus, {"nvidia.com/gpu": "1"}),),
        max_runtime_seconds=runtime,
        command=("/usr/bin/python3", "-c", code),  # the sandbox has no venv
    )


@pytest.fixture
async def runtime(database: Database, tmp_path: Path) -> AsyncIterator[AdmissionRuntime]:
    async with database.session() as session:
        await apply_config(session, parse_config(CONFIG), actor="test")
    backend = LocalBackend(tmp_path / "jobs", grace_seconds=1.0)
    runtime = AdmissionRuntime(database, {"local": backend}, interval=0.05)
    try:
        yield runtime
    finally:
        await runtime.stop()
        # Jobs outlive a closed backend by design; a test must not leave any behind.
        async with database.session() as session:
            rows = (await session.exec(select(WorkloadRow))).all()
        for workload in rows:
            for attempt in range(1, workload.attempt + 1):
                await backend.cancel(f"{workload.id}-{attempt}")
        await backend.close()


async def submit(db: Database, submission: WorkloadSubmission) -> str:
    async with db.session() as session:
        row, _ = await submit_workload(session, "alpha", submission, actor="test")
    return row.id


async def row(db: Database, workload_id: str) -> WorkloadRow:
    async with db.session() as session:
        found = await session.get(WorkloadRow, workload_id)
    assert found is not None
    return found


async def until(
    runtime: AdmissionRuntime, db: Database, workload_id: str, state: str
) -> WorkloadRow:
    for _ in range(400):  # 20 s at most
        assert await runtime.step()
        current = await row(db, workload_id)
        if current.state == state:
            return current
        await asyncio.sleep(0.05)
    raise AssertionError(
        f"{workload_id} never reached {state}: {current.state} {current.reason_message}"
    )


async def test_work_runs_to_success_and_frees_its_quota(
    runtime: AdmissionRuntime, database: Database
) -> None:
    first = await submit(database, job("first", "print('hello from the job')", gpus=2))
    second = await submit(database, job("second", "pass", gpus=2))
    done = await until(runtime, database, first, "succeeded")
    assert done.job_id == f"{first}-1" and done.finished_at is not None
    backend = runtime.dispatcher.backends["local"]
    assert b"hello from the job" in await backend.logs(done.job_id)
    await until(runtime, database, second, "succeeded")  # admitted once first released


async def test_a_failing_command_fails_with_its_exit_code(
    runtime: AdmissionRuntime, database: Database
) -> None:
    wid = await submit(database, job("bad", "raise SystemExit(3)"))
    failed = await until(runtime, database, wid, "failed")
    assert "3" in (failed.reason_message or "")


async def test_cancel_stops_a_running_job(runtime: AdmissionRuntime, database: Database) -> None:
    wid = await submit(database, job("sleeper", "import time; time.sleep(60)"))
    await until(runtime, database, wid, "running")
    async with database.session() as session:
        await cancel_workload(session, "alpha", wid, actor="alpha")
    await until(runtime, database, wid, "cancelled")


async def test_preemption_stops_the_victim_and_runs_the_urgent_gang(
    runtime: AdmissionRuntime, database: Database
) -> None:
    says_who = "import os, time; print(os.environ['IGNARA_WORKLOAD_ID'], flush=True)"
    low = await submit(database, job("low", f"{says_who}; time.sleep(60)", gpus=2))
    await until(runtime, database, low, "running")
    backend = runtime.dispatcher.backends["local"]
    for _ in range(200):  # 10 s at most: the first run has said who it is
        if await backend.logs(f"{low}-1"):
            break
        await asyncio.sleep(0.05)
    urgent = await submit(database, job("urgent", "pass", gpus=2, priority=10))
    await until(runtime, database, urgent, "succeeded")
    again = await until(runtime, database, low, "running")  # re-admitted, a new job
    assert again.attempt == 2 and again.job_id == f"{low}-2"
    first_run = await backend.status(f"{low}-1")
    assert first_run.state.value == "cancelled"  # the preempted process was stopped
    # Each run keeps its own output: the first one's stays readable after the second.
    assert (await backend.logs(f"{low}-1")).strip() == f"{low}-1".encode()


async def test_a_failing_round_does_not_end_admission(
    runtime: AdmissionRuntime, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = runtime.loop.run_pass
    calls = 0

    async def flaky() -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("a round that breaks")
        return await original()

    monkeypatch.setattr(runtime.loop, "run_pass", flaky)
    wid = await submit(database, job("after-the-failure", "pass"))
    await runtime.start()
    for _ in range(200):  # 10 s at most
        if (await row(database, wid)).state == "succeeded":
            break
        await asyncio.sleep(0.05)
    assert calls > 1 and (await row(database, wid)).state == "succeeded"


async def test_a_database_outage_is_logged_once_not_every_round(
    runtime: AdmissionRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    """Every round fails while the database is down: one line says so, one its end."""
    outage = True

    async def down() -> Any:
        if outage:
            raise OperationalError("SELECT 1", {}, ConnectionRefusedError("refused"))
        return None

    runtime.loop.run_pass = down  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO):
        for _ in range(50):
            await runtime.round()
        outage = False
        await runtime.round()
    lines = [r for r in caplog.records if r.name.startswith("gateway.")]
    assert [r.levelname for r in lines] == ["ERROR", "INFO"], [r.getMessage() for r in lines]
    assert lines[0].getMessage().startswith("database down: ")
    assert "50 calls failed meanwhile" in lines[1].getMessage()


async def test_stopping_lets_the_pass_in_progress_end_and_gives_its_connection_back(
    runtime: AdmissionRuntime, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Cancelling a pass inside its session left the connection to the garbage
    # collector (SQLAlchemy warned "non-checked-in connection" at shutdown).
    original = runtime.loop.run_pass
    in_session, finished = asyncio.Event(), asyncio.Event()

    async def slow_pass() -> Any:
        async with database.session() as session:
            await session.exec(select(WorkloadRow))
            in_session.set()
            await asyncio.sleep(0.2)
        finished.set()
        return await original()

    monkeypatch.setattr(runtime.loop, "run_pass", slow_pass)
    checked_out = 0

    def count(delta: int) -> Callable[..., None]:
        def listener(*_: Any) -> None:
            nonlocal checked_out
            checked_out += delta

        return listener

    pool = database.engine.sync_engine.pool
    event.listen(pool, "checkout", count(+1))
    event.listen(pool, "checkin", count(-1))
    await runtime.start()
    await asyncio.wait_for(in_session.wait(), timeout=10)
    await runtime.stop()
    assert finished.is_set() and checked_out == 0


async def test_an_idle_leader_skips_passes_until_something_changes(
    database: Database, tmp_path: Path
) -> None:
    """A pass runs when what it reads changed (a workload, the config), or when the
    last one is older than ``idle_pass_interval``; otherwise it is skipped."""
    async with database.session() as session:
        await apply_config(session, parse_config(CONFIG), actor="test")
    backend = LocalBackend(tmp_path / "jobs", grace_seconds=1.0)
    clock = [1000.0]
    runtime = AdmissionRuntime(
        database,
        {"local": backend},
        interval=0.05,
        idle_pass_interval=30.0,
        monotonic=lambda: clock[0],
    )
    passes = []
    real = runtime.loop.run_pass

    async def counted() -> Any:
        passes.append(clock[0])
        return await real()

    runtime.loop.run_pass = counted  # type: ignore[method-assign]
    try:
        assert await runtime.step()
        assert await runtime.step()
        assert (len(passes), runtime.skipped) == (1, 1)  # nothing changed: skipped

        waiting = await submit(database, job("big", "pass", gpus=3))  # never fits
        assert await runtime.step()
        assert len(passes) == 2  # a new workload: a pass, which explains why it waits
        assert (await row(database, waiting)).reason_code not in (None, "Pending")
        assert await runtime.step()
        assert len(passes) == 2  # the pass's own reason is no change

        changed = {**CONFIG, "cluster_queues": [dict(CONFIG["cluster_queues"][0])]}  # type: ignore[index]
        changed["cluster_queues"][0]["resource_groups"] = [
            {
                "resources": ["nvidia.com/gpu"],
                "flavors": [{"name": "h100", "quotas": {"nvidia.com/gpu": {"nominal": 4}}}],
            }
        ]
        async with database.session() as session:
            await apply_config(session, parse_config(changed), actor="test")
        assert await runtime.step()
        assert len(passes) == 3  # a config change: a pass, which admits it now
        assert (await row(database, waiting)).state in ("admitted", "running")

        # The job runs and ends in real time, which a slow machine stretches: wait for
        # its end, then the steps that take it in; after them nothing changes.
        await until(runtime, database, waiting, "succeeded")
        for _ in range(3):
            await runtime.step()
        settled = len(passes)
        await runtime.step()
        assert len(passes) == settled
        clock[0] += 31  # however quiet, a pass at least every idle_pass_interval
        await runtime.step()
        assert len(passes) == settled + 1
    finally:
        await runtime.stop()
        async with database.session() as session:
            rows = (await session.exec(select(WorkloadRow))).all()
        for workload in rows:
            for attempt in range(1, workload.attempt + 1):
                await backend.cancel(f"{workload.id}-{attempt}")
        await backend.close()
