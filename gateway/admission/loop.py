"""The admission loop: Kueue-semantics cycles over persisted workloads.

Each pass:
  1. read the quota configuration and every pending, admitted and running workload;
  2. rebuild the engine from them (what holds quota, what waits) and run it to quiet;
  3. write every decision (admissions, preemptions, reasons) in ONE transaction, each
     row guarded by its version, so a decision made on stale state (a cancel, a
     second leader) rolls the whole pass back instead of over-admitting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Table, bindparam, update
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from gateway.admission.snapshot import CHUNK, ChargedLoader, Snapshot, aware, read_snapshot
from gateway.admission.state import LiveBoard
from gateway.observability import Observability
from quota import Preemption
from quota.budgets import is_budget
from quota.cache import AdmittedWorkload
from quota.reasons import PendingReason, ReasonCode
from tenants import Database
from tenants.models import WorkloadRow
from tenants.models._base import utcnow
from tenants.services.tenants import QUEUE_CLOSED, queue_closed_message
from tenants.services.workloads import record_event, update_if_unchanged

__all__ = ["AdmissionLoop", "PassResult", "StaleDecisionError"]


PREEMPTED = "Preempted"


class StaleDecisionError(Exception):
    """A row changed between reading and writing; the pass is rolled back."""


@dataclass
class PassResult:
    admitted: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.admitted or self.preempted)


class AdmissionLoop:
    def __init__(
        self,
        database: Database,
        *,
        clock: Callable[[], float] = time.time,
        charged: ChargedLoader | None = None,
        board: LiveBoard | None = None,
        observe: Observability | None = None,
    ) -> None:
        self.database = database
        self.clock = clock
        self.charged = charged
        self.board = board  # told the state after each pass that commits
        self.observe = observe or Observability()
        self.last_snapshot: Snapshot | None = None  # what the last committed pass read

    async def run_pass(self) -> PassResult:
        """One pass; raises :class:`StaleDecisionError` (nothing written) on a race."""
        # 1. Read, as of one moment.
        snapshot = await read_snapshot(self.database, charged=self.charged)
        # 2. Decide.
        by_id = snapshot.by_id
        closed = snapshot.closed()
        engine, holding = await snapshot.build_engine(
            clock=self.clock, skip=frozenset(row.id for row in closed)
        )
        engine.schedule()
        admitted = {name: r for name, r in engine.admitted.items() if name not in holding}
        preempted = holding - set(engine.admitted)
        # What each waiting workload is told, where it changed: computed before the
        # transaction opens, a slice at a time (twenty thousand pending is a second).
        reasons: list[dict[str, Any]] = []
        for i, workload in enumerate(engine.pending()):
            if i % CHUNK == CHUNK - 1:
                await asyncio.sleep(0)
            if workload.name in preempted:
                continue
            reason = engine.reason(workload.name)
            told = None if reason is None else _explained(by_id[workload.name], reason)
            if told is not None:
                reasons.append(told)
        # 3. Write.
        async with self.database.session() as session:
            for name, record in admitted.items():
                await _admit(session, by_id[name], record)
            for name in preempted:
                await _preempt(session, by_id[name], engine.preemption(name))
            await _explain(session, reasons)
            for row in closed:
                await _closed(session, row)
        self.last_snapshot = snapshot
        if self.board is not None:
            self.board.publish(
                engine, by_id, as_of=snapshot.now, opened=snapshot.opened, closed=closed
            )
        self._report(snapshot.now, by_id, admitted, {n: engine.preemption(n) for n in preempted})
        return PassResult(sorted(admitted), sorted(preempted))

    def _report(
        self,
        now: datetime,
        rows: Mapping[str, WorkloadRow],
        admitted: Mapping[str, AdmittedWorkload],
        preempted: Mapping[str, Preemption | None],
    ) -> None:
        """What a committed pass decided, as metrics and one log line per decision."""
        metrics, events = self.observe.metrics, self.observe.events
        for name, record in sorted(admitted.items()):
            row, queue = rows[name], record.admission.cluster_queue
            waited = max(0.0, (now - aware(row.created_at)).total_seconds())
            if metrics is not None:
                metrics.admitted.labels(queue).inc()
                metrics.admission_wait.labels(queue).observe(waited)
            flavors = sorted({f for p in record.admission.pod_sets for f in p.flavors.values()})
            events.info(
                "workload.admitted",
                workload=name,
                tenant=row.tenant,
                queue=queue,
                flavors=flavors,
                attempt=row.attempt + 1,
                waited_seconds=round(waited, 3),
            )
        for name, why in sorted(preempted.items()):
            row = rows[name]
            reason = why.reason.value if why is not None else "Unknown"
            if metrics is not None:
                metrics.preempted.labels(row.queue, reason).inc()
            events.info(
                "workload.preempted",
                workload=name,
                tenant=row.tenant,
                queue=row.queue,
                preemptor=why.preemptor if why is not None else None,
                reason=reason,
            )


async def _guarded(
    session: AsyncSession, row: WorkloadRow, expected_state: str, **values: Any
) -> None:
    if not await update_if_unchanged(session, row, expected_state=expected_state, **values):
        raise StaleDecisionError(f"workload {row.id} changed while the loop decided")


async def _admit(session: AsyncSession, row: WorkloadRow, record: AdmittedWorkload) -> None:
    admission = {
        "cluster_queue": record.admission.cluster_queue,
        "pod_sets": [
            # A budget takes its metered resource's flavor; stored as asked for.
            {
                "name": p.name,
                "count": p.count,
                "flavors": {r: f for r, f in p.flavors.items() if not is_budget(r)},
            }
            for p in record.admission.pod_sets
        ],
    }
    await _guarded(
        session,
        row,
        "pending",
        state="admitted",
        admission=admission,
        admitted_at=utcnow(),
        attempt=row.attempt + 1,
        reason_code="Admitted",
        reason_message="quota reserved",
        reason_detail=None,
    )
    flavors = sorted({f for p in record.admission.pod_sets for f in p.flavors.values()})
    record_event(
        session,
        row,
        "admitted",
        {"queue": record.admission.cluster_queue, "flavors": flavors},
        attempt=row.attempt + 1,
    )


async def _preempt(session: AsyncSession, row: WorkloadRow, why: Preemption | None) -> None:
    cause = why.message if why is not None else "preempted to make room for another workload"
    await _guarded(
        session,
        row,
        row.state,
        state="pending",
        admission=None,
        admitted_at=None,
        queued_at=utcnow(),
        reason_detail=None,
        reason_code=PREEMPTED,
        reason_message=f"{cause}; it waits for quota again",
    )
    record_event(
        session,
        row,
        "preempted",
        {
            "by": why.preemptor if why is not None else None,
            "reason": why.reason.value if why is not None else None,
            "message": cause,
        },
    )
    if row.job_id is None:  # no job to stop first: it waits for quota again at once
        record_event(session, row, "requeued", {"why": "preempted"})


async def _closed(session: AsyncSession, row: WorkloadRow) -> None:
    """A pending workload whose queue is no longer its tenant's (moved to another
    tenant, or the tenant deleted) is not admitted; it waits, saying so, until the
    queue is given back or it is cancelled."""
    message = queue_closed_message(row.queue, row.tenant)
    if (row.reason_code, row.reason_message) == (QUEUE_CLOSED, message):
        return
    await session.exec(
        update(WorkloadRow)
        .where(col(WorkloadRow.id) == row.id, col(WorkloadRow.version) == row.version)
        .values(reason_code=QUEUE_CLOSED, reason_message=message, reason_detail=None)
    )


def _explained(row: WorkloadRow, reason: PendingReason) -> dict[str, Any] | None:
    """The values that tell ``row`` why it waits, or ``None`` when it already says so."""
    if reason.code is ReasonCode.QUEUED and row.reason_code == PREEMPTED:
        return None  # not considered since: the preemption stays the news until it is
    detail = reason.detail()
    message = reason.message[:2000]
    if (row.reason_code, row.reason_message, row.reason_detail) == (
        reason.code.value,
        message,
        detail,
    ):
        return None
    return {
        "w_id": row.id,
        "w_version": row.version,
        "w_code": reason.code.value,
        "w_message": message,
        "w_detail": detail,
    }


async def _explain(session: AsyncSession, reasons: list[dict[str, Any]]) -> None:
    """Write the reasons in one statement (executed for many rows): the first pass over
    twenty thousand pending workloads is one round trip, not twenty thousand.
    A reason is advice, not a decision: written only while the row is unchanged."""
    if not reasons:
        return
    table: Table = WorkloadRow.__table__  # type: ignore[attr-defined]
    statement = (
        update(table)
        .where(table.c.id == bindparam("w_id"), table.c.version == bindparam("w_version"))
        .values(
            reason_code=bindparam("w_code"),
            reason_message=bindparam("w_message"),
            reason_detail=bindparam("w_detail"),
        )
    )
    # On the session's connection, as the usage records' batch insert: an executemany,
    # without SQLModel's session.execute() (meant for ORM reads, and deprecated there).
    await (await session.connection()).execute(statement, reasons)
