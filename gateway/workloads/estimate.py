"""What-if for a submission: would it be admitted now, what blocks it, whom it would
preempt, what it would commit of each GPU-hour budget, and when it would start.
Nothing is stored: the engine is built from a snapshot and played forward."""

from __future__ import annotations

import asyncio
from datetime import datetime

import msgspec

from gateway.admission.snapshot import ChargedLoader, Snapshot, read_snapshot
from gateway.workloads.schemas import Blocking, Reason
from quota import QuotaEngine, WorkloadError
from quota.budgets import format_hours
from quota.cache import ClusterQueueNode
from quota.forecast import ASSUMPTIONS, forecast
from quota.reasons import PendingReason
from quota.resources import FlavorResource
from quota.tree import available, path_to_root
from tenants import Database
from tenants.errors import ConflictError
from tenants.services.workloads import WorkloadSubmission, new_workload_row, workload_from_row

__all__ = ["BudgetLine", "EstimateOut", "Victim", "estimate"]


class Victim(msgspec.Struct):
    id: str
    name: str
    queue: str


class Preempts(msgspec.Struct):
    """The caller's own workloads it would preempt, and how many of other tenants'."""

    workloads: list[Victim] = []
    others: int = 0


class BudgetLine(msgspec.Struct):
    """One GPU-hour budget on its path: what it would commit there, and what is left
    at that level now and after (resource-hours, to 1/1000)."""

    level: str  # ClusterQueue | Cohort
    name: str
    flavor: str
    resource: str
    commits: str
    left: str
    left_after: str


class EstimateOut(msgspec.Struct):
    estimate: bool
    assumptions: str
    computed_at: datetime
    admitted_now: bool
    # When it would start: now if admitted now; None if not within ``horizon``.
    estimated_start: datetime | None
    horizon: datetime
    reason: Reason | None  # why it would wait, when it would
    preempts: Preempts
    budgets: list[BudgetLine]


async def estimate(
    database: Database,
    tenant: str,
    submission: WorkloadSubmission,
    *,
    charged: ChargedLoader | None = None,
) -> EstimateOut:
    snapshot = await read_snapshot(database, charged=charged)
    # The engine's work takes up to a second with a thousand pending: off the event loop.
    return await asyncio.to_thread(_estimate, snapshot, tenant, submission)


def _estimate(snapshot: Snapshot, tenant: str, submission: WorkloadSubmission) -> EstimateOut:
    # 1. The picture as the admission loop sees it, with the candidate added last.
    row = new_workload_row(tenant, submission)
    row.created_at = snapshot.now
    engine, _ = snapshot.engine(skip=frozenset(r.id for r in snapshot.closed()))
    try:
        engine.add(workload_from_row(row))
    except WorkloadError:  # the queue went between the checks and the snapshot
        raise ConflictError(f"cluster queue {submission.queue!r} changed meanwhile") from None
    queue = engine.state.queues[row.queue]
    lines = _budget_lines(engine, queue, row.id)
    # 2. Now: admitted, preempting, or waiting, and why.
    victims = [
        name
        for cycle in engine.schedule()
        for name, why in cycle.preemptions.items()
        if why.preemptor == row.id
    ]
    admitted = row.id in engine.admitted
    reason = None if admitted else _reason(engine.reason(row.id))
    if admitted:
        admission = engine.admitted[row.id].admission
        flavors = {f for p in admission.pod_sets for f in p.flavors.values()}
        lines = [line for line in lines if line.flavor in flavors]
    # 3. Later: play the engine forward.
    played = forecast(engine)
    by_id = snapshot.by_id
    own = [by_id[v] for v in victims if v in by_id and by_id[v].tenant == tenant]
    return EstimateOut(
        estimate=True,
        assumptions=ASSUMPTIONS,
        computed_at=snapshot.now,
        admitted_now=admitted,
        estimated_start=snapshot.now if admitted else played.starts.get(row.id),
        horizon=played.horizon or snapshot.now,
        reason=reason,
        preempts=Preempts(
            [Victim(v.id, v.name, v.queue) for v in own], others=len(victims) - len(own)
        ),
        budgets=lines,
    )


def _budget_lines(engine: QuotaEngine, queue: ClusterQueueNode, name: str) -> list[BudgetLine]:
    """Per budget flavor-resource of the queue: the candidate's commitment, and what
    each level on its path has left, before it is scheduled."""
    workload = next((w for w in engine.queues.pending() if w.name == name), None)
    lines: list[BudgetLine] = []
    if workload is None:
        return lines
    for group in queue.spec.resource_groups:
        for budget in (b for m, b in queue.budgets.items() if b in group.resources):
            commits = sum(p.count * p.requests.get(budget, 0) for p in workload.pod_sets)
            if not commits:
                continue
            for flavor in group.flavors:
                fr = FlavorResource(flavor.name, budget)
                for node in path_to_root(queue):
                    left = max(0, available(node, fr))
                    lines.append(
                        BudgetLine(
                            level="ClusterQueue" if node is queue else "Cohort",
                            name=node.name,
                            flavor=flavor.name,
                            resource=budget,
                            commits=format_hours(commits),
                            left=format_hours(left),
                            left_after=format_hours(left - commits),
                        )
                    )
    return lines


def _reason(reason: PendingReason | None) -> Reason | None:
    if reason is None:
        return None
    blocking = [msgspec.convert(b, Blocking) for b in reason.detail()]
    return Reason(reason.code.value, reason.message, blocking)
