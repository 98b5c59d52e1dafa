"""The admission loop on persisted state, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from sqlmodel import col, select

from gateway.admission import AdmissionLoop, LeaderLock, StaleDecisionError
from tenants import Database, parse_config
from tenants.models import WorkloadRow
from tenants.services import apply_config
from tenants.services.workloads import (
    PodSetRequest,
    WorkloadSubmission,
    cancel_workload,
    submit_workload,
)

CONFIG = yaml.safe_load(
    """
flavors: [h100]
cohorts: [{name: org}]
cluster_queues:
  - name: team-a
    cohort: org
    preemption: {within_cluster_queue: LowerPriority}
    resource_groups:
      - resources: [nvidia.com/gpu]
        flavors: [{name: h100, quotas: {nvidia.com/gpu: {nominal: 4, borrowing_limit: 2}}}]
  - name: team-b
    cohort: org
    resource_groups:
      - resources: [nvidia.com/gpu]
        flavors: [{name: h100, quotas: {nvidia.com/gpu: {nominal: 4}}}]
tenants:
  - {name: alpha, queues: [team-a]}
  - {name: beta, queues: [team-b]}
"""
)


def job(name: str, queue: str, gpus: int, priority: int = 0) -> WorkloadSubmission:
    return WorkloadSubmission(
        name=name,
        queue=queue,
        priority=priority,
        pod_sets=(PodSetRequest("workers", gpus, {"nvidia.com/gpu": "1"}),),
        max_runtime_seconds=60,
        command=("true",),
    )


async def setup(db: Database, *jobs: tuple[str, WorkloadSubmission]) -> dict[str, str]:
    async with db.session() as session:
        await apply_config(session, parse_config(CONFIG), actor="test")
    ids = {}
    for tenant, submission in jobs:
        async with db.session() as session:
            row, _ = await submit_workload(session, tenant, submission, actor="test")
            ids[submission.name] = row.id
    return ids


async def states(db: Database) -> dict[str, str]:
    async with db.session() as session:
        rows = (await session.exec(select(WorkloadRow))).all()
    return {row.name: row.state for row in rows}


async def gpus_held(db: Database, queue: str) -> int:
    async with db.session() as session:
        rows = (
            await session.exec(
                select(WorkloadRow).where(
                    WorkloadRow.queue == queue, col(WorkloadRow.state).in_(("admitted", "running"))
                )
            )
        ).all()
    return sum(p["count"] for row in rows for p in (row.admission or {}).get("pod_sets", []))


async def test_a_pass_admits_within_quota_and_explains_the_rest(database: Database) -> None:
    await setup(
        database,
        ("alpha", job("a-big", "team-a", 6)),
        ("alpha", job("a-more", "team-a", 1)),
        ("beta", job("b-one", "team-b", 2)),
    )
    result = await AdmissionLoop(database).run_pass()
    assert result.admitted == sorted(result.admitted) and len(result.admitted) == 2
    assert await states(database) == {"a-big": "admitted", "a-more": "pending", "b-one": "admitted"}
    assert await gpus_held(database, "team-a") <= 6  # nominal 4 + borrowing limit 2
    async with database.session() as session:
        waiting = (
            await session.exec(select(WorkloadRow).where(WorkloadRow.name == "a-more"))
        ).one()
    # within nominal, so preemption was tried; nothing of lower priority to evict
    assert waiting.reason_code == "NoPreemptionCandidates"
    assert "requests 1 nvidia.com/gpu in flavor h100" in (waiting.reason_message or "")
    assert waiting.reason_detail == [
        {
            "code": "InsufficientQuota",
            "level": "Cohort",
            "name": "org",
            "flavor": "h100",
            "resource": "nvidia.com/gpu",
            "requested": "1",
            "available": "0",
        }
    ]
    again = await AdmissionLoop(database).run_pass()
    assert not again.changed  # nothing admitted twice


async def test_finishing_work_lets_the_next_in(database: Database) -> None:
    await setup(
        database, ("alpha", job("first", "team-a", 6)), ("alpha", job("second", "team-a", 6))
    )
    await AdmissionLoop(database).run_pass()
    async with database.session() as session:
        row = (await session.exec(select(WorkloadRow).where(WorkloadRow.name == "first"))).one()
        row.state = "succeeded"
        session.add(row)
    await AdmissionLoop(database).run_pass()
    assert (await states(database))["second"] == "admitted"


async def test_a_higher_priority_gang_preempts_in_its_own_queue(database: Database) -> None:
    await setup(database, ("alpha", job("low", "team-a", 4)))
    await AdmissionLoop(database).run_pass()
    await setup_more(database, ("alpha", job("urgent", "team-a", 4, priority=10)))
    first = await AdmissionLoop(database).run_pass()
    low = await row_named(database, "low")
    assert first.preempted == [low.id]
    assert await states(database) == {"low": "pending", "urgent": "admitted"}
    assert (low.reason_code, low.admission) == ("Preempted", None)
    urgent = await row_named(database, "urgent")
    assert low.reason_message == (
        f"preempted to accommodate workload {urgent.id} due to prioritization in the "
        "cluster queue; it waits for quota again"
    )


async def test_a_preempted_workload_says_so_until_it_is_considered_again(
    database: Database,
) -> None:
    """Behind a head that does not fit (StrictFIFO), the preempted workload is not
    considered in later passes: it keeps saying who preempted it, not "Queued"."""
    strict = {**CONFIG, "cluster_queues": [dict(q) for q in CONFIG["cluster_queues"]]}
    strict["cluster_queues"][0]["queueing_strategy"] = "StrictFIFO"
    async with database.session() as session:
        await apply_config(session, parse_config(strict), actor="test")
    await setup_more(database, ("alpha", job("low", "team-a", 4)))
    await AdmissionLoop(database).run_pass()
    await setup_more(
        database,
        ("alpha", job("urgent", "team-a", 4, priority=10)),
        ("alpha", job("blocker", "team-a", 6, priority=5)),
    )
    for _ in range(3):
        await AdmissionLoop(database).run_pass()
        assert await states(database) == {
            "low": "pending",
            "urgent": "admitted",
            "blocker": "pending",
        }
        low = await row_named(database, "low")
        assert low.reason_code == "Preempted"
        assert (low.reason_message or "").startswith("preempted to accommodate workload ")
    # Once it is considered (the head ahead of it is gone), it says why it waits now.
    async with database.session() as session:
        await cancel_workload(
            session, "alpha", (await row_named(database, "blocker")).id, actor="alpha"
        )
    await AdmissionLoop(database).run_pass()
    assert (await row_named(database, "low")).reason_code not in ("Preempted", "Queued")


async def test_a_cancel_racing_the_pass_rolls_the_pass_back(database: Database) -> None:
    ids = await setup(database, ("alpha", job("w", "team-a", 1)))
    loop = AdmissionLoop(database)
    original = loop.database.session

    calls = 0

    def racing_session() -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:  # the write, after the snapshot read: the tenant cancels first

            async def cancel() -> None:
                async with original() as session:
                    await cancel_workload(session, "alpha", ids["w"], actor="alpha")

            return _CancelFirst(cancel, original)
        return original()

    loop.database.session = racing_session  # type: ignore[method-assign]
    with pytest.raises(StaleDecisionError):
        await loop.run_pass()
    loop.database.session = original  # type: ignore[method-assign]
    assert await states(database) == {"w": "cancelled"}


async def test_only_one_leader_at_a_time(database: Database) -> None:
    first, second = LeaderLock(database), LeaderLock(Database(database.url))
    try:
        assert await first.try_acquire()
        assert not await second.try_acquire()
        await first.release()
        assert await second.try_acquire()
    finally:
        await first.release()
        await second.release()
        await second.database.dispose()


async def setup_more(db: Database, *jobs: tuple[str, WorkloadSubmission]) -> None:
    for tenant, submission in jobs:
        async with db.session() as session:
            await submit_workload(session, tenant, submission, actor="test")


async def row_named(db: Database, name: str) -> WorkloadRow:
    async with db.session() as session:
        return (await session.exec(select(WorkloadRow).where(WorkloadRow.name == name))).one()


class _CancelFirst:
    """An async context manager that first runs ``before()``, then opens a session."""

    def __init__(self, before: Any, sessions: Any) -> None:
        self.before, self.sessions, self.inner = before, sessions, None

    async def __aenter__(self) -> Any:
        await self.before()
        self.inner = self.sessions()
        return await self.inner.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        assert self.inner is not None
        return await self.inner.__aexit__(*exc)


async def test_cancelling_a_waiting_workload_clears_what_blocked_it(database: Database) -> None:
    ids = await setup(
        database, ("alpha", job("big", "team-a", 6)), ("alpha", job("waits", "team-a", 6))
    )
    await AdmissionLoop(database).run_pass()
    assert (await row_named(database, "waits")).reason_detail  # the cohort refuses it
    async with database.session() as session:
        await cancel_workload(session, "alpha", ids["waits"], actor="alice")
    cancelled = await row_named(database, "waits")
    assert (cancelled.state, cancelled.reason_code) == ("cancelled", "Cancelled")
    assert cancelled.reason_message == "cancelled by alice"
    assert cancelled.reason_detail is None


async def test_a_preempted_workload_waits_behind_those_queued_before_its_eviction(
    database: Database,
) -> None:
    """Kueue's queue-order timestamp: ordered by its creation, the victim would jump
    back ahead of the workload that waited while it ran."""
    await setup(database, ("alpha", job("low", "team-a", 4)))
    await AdmissionLoop(database).run_pass()
    await setup_more(database, ("alpha", job("later", "team-a", 4)))
    await AdmissionLoop(database).run_pass()
    await setup_more(database, ("alpha", job("urgent", "team-a", 4, priority=10)))
    await AdmissionLoop(database).run_pass()
    assert await states(database) == {"low": "pending", "later": "pending", "urgent": "admitted"}
    low, later = await row_named(database, "low"), await row_named(database, "later")
    assert low.queued_at is not None and low.queued_at > later.created_at
    async with database.session() as session:
        urgent = await row_named(database, "urgent")
        urgent.state = "succeeded"
        session.add(urgent)
    await AdmissionLoop(database).run_pass()
    assert await states(database) == {"low": "pending", "later": "admitted", "urgent": "succeeded"}
