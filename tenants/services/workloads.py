"""Training workloads as durable rows: submit (idempotent), read, list, cancel, all
within one tenant; and the conversions the admission loop needs."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from sqlalchemy import func, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from quota.budgets import is_budget, metered
from quota.model import Admission, PodSet, PodSetAssignment, Workload
from quota.resources import parse_quantity
from tenants.errors import ConflictError, InvalidRequestError, NotFoundError
from tenants.models import AuditEntry, ClusterQueueRow, Tenant, WorkloadEventRow, WorkloadRow
from tenants.models._base import utcnow
from tenants.services.charges import charge_ended_run

__all__ = [
    "EVENT_TYPES",
    "FINAL_STATES",
    "PodSetRequest",
    "WorkloadPage",
    "WorkloadSubmission",
    "admission_from_row",
    "cancel_workload",
    "check_submission",
    "events_of",
    "get_workload",
    "list_every_workload",
    "list_workloads",
    "new_workload_row",
    "parse_cursor",
    "record_event",
    "submit_workload",
    "update_if_unchanged",
    "workload_from_row",
]

FINAL_STATES = ("succeeded", "failed", "cancelled")
EVENT_TYPES = (
    "submitted",
    "admitted",
    "dispatched",
    "adopted",
    "running",
    "preempted",
    "requeued",
    "lost",
    "cancelled",
    "finished",
    "failed",
)


@dataclass(frozen=True)
class PodSetRequest:
    name: str
    count: int
    requests: dict[str, str]  # resource -> quantity, as the caller wrote it
    min_count: int | None = None


@dataclass(frozen=True)
class WorkloadSubmission:
    """What a tenant asks for; already checked for shape and bounds by the caller."""

    name: str
    queue: str
    pod_sets: tuple[PodSetRequest, ...]
    max_runtime_seconds: int
    command: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    priority: int = 0
    backend: str | None = None  # None: the backend of the flavor it is admitted on
    # Backend-specific sections, validated by the API: {"slurm": {"qos": ...}}.
    options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "pod_sets": [asdict(p) for p in self.pod_sets],
            "max_runtime_seconds": self.max_runtime_seconds,
            "backend": self.backend,
            "job": {"command": list(self.command), "env": dict(self.env)},
        }
        if self.options:  # absent when none: a repeat of an older request keeps its hash
            spec["options"] = self.options
        return spec

    def fingerprint(self) -> str:
        body = {**self.spec(), "name": self.name, "queue": self.queue, "priority": self.priority}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class WorkloadPage:
    items: Sequence[WorkloadRow]
    next_cursor: str | None


async def submit_workload(
    session: AsyncSession,
    tenant: str,
    submission: WorkloadSubmission,
    *,
    actor: str,
    idempotency_key: str | None = None,
) -> tuple[WorkloadRow, bool]:
    """Persist a new pending workload; returns it and whether it was created. A repeat
    with the same ``idempotency_key`` returns the first one (a different request under
    that key is a :class:`ConflictError`), however many race: the UNIQUE(tenant,
    idempotency_key) constraint picks the one that is created."""
    fingerprint = submission.fingerprint()
    if idempotency_key is not None:
        # Not the guard, the constraint is: this only answers a repeat without a
        # failed insert, and as it was first answered even if the queue has gone since.
        earlier = await _by_idempotency_key(session, tenant, idempotency_key)
        if earlier is not None:
            return _repeat(earlier, fingerprint), False
    await check_submission(session, tenant, submission)
    row = new_workload_row(tenant, submission)
    row.idempotency_key = idempotency_key
    row.request_hash = fingerprint
    audit = AuditEntry(
        actor=actor,
        action="create",
        kind="workload",
        name=row.id,
        tenant=tenant,
        detail={"name": submission.name, "queue": submission.queue},
    )
    try:
        # The row and its audit entry in one savepoint: a loser of the race rolls back
        # both, and its session stays usable to read the winner.
        async with session.begin_nested():
            session.add_all([row, audit])
            await session.flush()  # the row first: its event refers to it
            record_event(session, row, "submitted", {"queue": submission.queue})
    except IntegrityError:
        winner = None
        if idempotency_key is not None:
            winner = await _by_idempotency_key(session, tenant, idempotency_key)
        if winner is None:  # another constraint: the tenant or queue went meanwhile
            raise ConflictError("a concurrent change conflicts with this workload") from None
        return _repeat(winner, fingerprint), False
    return row, True


async def _by_idempotency_key(session: AsyncSession, tenant: str, key: str) -> WorkloadRow | None:
    query = select(WorkloadRow).where(
        WorkloadRow.tenant == tenant, WorkloadRow.idempotency_key == key
    )
    return (await session.exec(query)).first()


def _repeat(earlier: WorkloadRow, fingerprint: str) -> WorkloadRow:
    if earlier.request_hash != fingerprint:
        raise ConflictError("this Idempotency-Key was already used for another request")
    return earlier


async def check_submission(
    session: AsyncSession, tenant: str, submission: WorkloadSubmission
) -> None:
    """Refuse what could never be stored: a tenant that is gone, a queue that is not
    the tenant's, a resource its queue has no quota for."""
    owner = await session.get(Tenant, tenant)
    if owner is None or owner.deleted_at is not None:
        raise NotFoundError(f"tenant {tenant!r} does not exist")
    queue = await session.get(ClusterQueueRow, submission.queue)
    if queue is None or submission.queue not in owner.queues:
        # The same answer whether the queue is missing or another tenant's.
        raise NotFoundError(f"cluster queue {submission.queue!r} is not available to {tenant!r}")
    _check_resources(submission, queue)


def new_workload_row(tenant: str, submission: WorkloadSubmission) -> WorkloadRow:
    """A pending workload as it would be stored (not added to any session)."""
    return WorkloadRow(
        tenant=tenant,
        name=submission.name,
        queue=submission.queue,
        priority=submission.priority,
        spec=submission.spec(),
        reason_code="Queued",
        reason_message="waiting for the admission loop",
    )


def _check_resources(submission: WorkloadSubmission, queue: ClusterQueueRow) -> None:
    covered = {r for group in queue.spec.get("resource_groups", []) for r in group["resources"]}
    for pod_set in submission.pod_sets:
        for resource, value in pod_set.requests.items():
            amount = parse_quantity(value)
            if is_budget(resource):
                raise InvalidRequestError(
                    f"pod set {pod_set.name!r} requests {resource!r}, a budget: it is committed"
                    f" from max_runtime_seconds; request {metered(resource)!r} instead"
                )
            if amount and resource not in covered:
                raise InvalidRequestError(
                    f"pod set {pod_set.name!r} requests {resource!r}, which cluster queue "
                    f"{queue.name!r} has no quota for (it covers {', '.join(sorted(covered))})"
                )
        if pod_set.min_count is not None and pod_set.min_count > pod_set.count:
            raise InvalidRequestError(f"pod set {pod_set.name!r}: min_count exceeds count")


async def tenant_of_workload(session: AsyncSession, workload_id: str) -> str:
    """The tenant a workload belongs to, for a platform admin's read or cancel (404 when
    there is no such workload)."""
    row = await session.get(WorkloadRow, workload_id)
    if row is None:
        raise NotFoundError(f"workload {workload_id!r} not found")
    return str(row.tenant)


async def get_workload(session: AsyncSession, tenant: str, workload_id: str) -> WorkloadRow:
    """The workload, if it is this tenant's; another tenant's is as absent as a missing one."""
    row = await session.get(WorkloadRow, workload_id)
    if row is None or row.tenant != tenant:
        raise NotFoundError(f"workload {workload_id!r} not found")
    return row


async def list_workloads(
    session: AsyncSession,
    tenant: str,
    *,
    state: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> WorkloadPage:
    """This tenant's workloads, oldest first; ``cursor`` continues after a page."""
    return await list_every_workload(
        session, tenant=tenant, state=state, limit=limit, cursor=cursor
    )


async def list_every_workload(
    session: AsyncSession,
    *,
    tenant: str | None,
    queue: str | None = None,
    state: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> WorkloadPage:
    """Workloads of every tenant (``tenant`` None: for a platform admin only) or of one,
    optionally of one queue and state, oldest first; ``cursor`` continues after a page."""
    query = select(WorkloadRow)
    if tenant is not None:
        query = query.where(WorkloadRow.tenant == tenant)
    if queue is not None:
        query = query.where(WorkloadRow.queue == queue)
    if state is not None:
        query = query.where(WorkloadRow.state == state)
    if cursor is not None:
        after, last_id = parse_cursor(cursor)
        query = query.where(
            (col(WorkloadRow.created_at) > after)
            | ((col(WorkloadRow.created_at) == after) & (col(WorkloadRow.id) > last_id))
        )
    query = query.order_by(col(WorkloadRow.created_at), col(WorkloadRow.id)).limit(limit + 1)
    rows = (await session.exec(query)).all()
    more = len(rows) > limit
    items = rows[:limit]
    next_cursor = None
    if more:
        last = items[-1]
        # "Z", not "+00:00": a "+" pasted into a query string unencoded reads as a space.
        at = last.created_at.astimezone(UTC).isoformat().replace("+00:00", "Z")
        next_cursor = f"{at}|{last.id}"
    return WorkloadPage(items, next_cursor)


_CURSOR = re.compile(r"(?P<at>[0-9T:.+Z-]{10,40})\|(?P<id>[0-9a-f]{32})")


def parse_cursor(cursor: str) -> tuple[datetime, str]:
    """The creation time (UTC) and id of the last workload of the page a cursor ends;
    raises :class:`InvalidRequestError` naming what is wrong with it."""
    match = _CURSOR.fullmatch(cursor)
    if match is None:
        raise InvalidRequestError("cursor: not a cursor this API returned")
    try:
        at = datetime.fromisoformat(match["at"])
    except ValueError:
        raise InvalidRequestError("cursor: its timestamp is not an ISO 8601 time") from None
    if at.tzinfo is None:
        raise InvalidRequestError("cursor: its timestamp has no UTC offset")
    try:
        return at.astimezone(UTC), match["id"]
    except OverflowError:  # e.g. 9999-12-31T23:59:59-01:00 is past year 9999 in UTC
        raise InvalidRequestError("cursor: its timestamp is out of range") from None


async def cancel_workload(
    session: AsyncSession, tenant: str, workload_id: str, *, actor: str
) -> WorkloadRow:
    """Cancel: a pending workload at once; an admitted or running one, or a preempted
    one whose job is still stopping, once its backend job has stopped (the dispatcher
    sees ``cancel_requested``)."""
    row = await get_workload(session, tenant, workload_id)
    if row.state in FINAL_STATES:
        return row
    now = utcnow()
    row.reason_detail = None  # what blocked it no longer matters
    if row.state == "pending" and row.job_id is None:
        row.state, row.finished_at = "cancelled", now
        row.reason_code, row.reason_message = "Cancelled", f"cancelled by {actor}"
    else:  # a preempted workload's job may still be stopping: it is cancelled once gone
        row.cancel_requested = True
        row.reason_code, row.reason_message = "Cancelling", f"cancellation requested by {actor}"
    row.version += 1
    row.updated_at = now
    session.add(row)
    if row.state == "cancelled":
        record_event(session, row, "cancelled", {"by": actor})
    session.add(
        AuditEntry(
            actor=actor, action="cancel", kind="workload", name=row.id, tenant=tenant, detail={}
        )
    )
    return row


async def update_if_unchanged(
    session: AsyncSession, row: WorkloadRow, *, expected_state: str | None = None, **values: Any
) -> bool:
    """Write ``values`` (and bump the version) only if nobody changed ``row`` since it
    was read, and it is still in ``expected_state`` if one is given.

    Every change of a workload's state goes through here, so this is where a run that
    the change ends (finished, failed, cancelled, preempted, lost) is charged its
    GPU-hours, in the same transaction: a change never lands without its charge, nor
    a charge without its change (:func:`tenants.services.charges.charge_ended_run`)."""
    condition = (col(WorkloadRow.id) == row.id) & (col(WorkloadRow.version) == row.version)
    if expected_state is not None:
        condition = condition & (col(WorkloadRow.state) == expected_state)
    now = utcnow()
    result = await session.exec(
        update(WorkloadRow)
        .where(condition)
        .values(version=row.version + 1, updated_at=now, **values)
    )
    if result.rowcount != 1:
        return False
    await charge_ended_run(session, row, values, now)
    return True


def workload_from_row(row: WorkloadRow) -> Workload:
    """The engine's view of a stored workload (keyed by its id)."""
    return Workload(
        name=row.id,
        cluster_queue=row.queue,
        priority=row.priority,
        created=row.created_at.timestamp(),
        queued=None if row.queued_at is None else row.queued_at.timestamp(),
        max_runtime=Fraction(row.spec["max_runtime_seconds"]),
        pod_sets=tuple(
            PodSet(
                name=p["name"],
                count=p["count"],
                min_count=p.get("min_count"),
                requests={r: parse_quantity(v) for r, v in p["requests"].items()},
            )
            for p in row.spec["pod_sets"]
        ),
    )


def admission_from_row(row: WorkloadRow) -> Admission:
    assert row.admission is not None
    return Admission(
        cluster_queue=row.queue,
        pod_sets=tuple(
            PodSetAssignment(name=p["name"], count=p["count"], flavors=dict(p["flavors"]))
            for p in row.admission["pod_sets"]
        ),
    )


def record_event(
    session: AsyncSession,
    row: WorkloadRow,
    type: str,
    detail: dict[str, Any] | None = None,
    *,
    attempt: int | None = None,
) -> None:
    """Note an event of ``row`` in ``session``: call it in the transaction that makes the
    change it describes, after that change is known to be written."""
    assert type in EVENT_TYPES, type
    session.add(
        WorkloadEventRow(
            workload_id=row.id,
            type=type,
            attempt=row.attempt if attempt is None else attempt,
            at=utcnow(),
            detail=detail or {},
        )
    )


async def events_of(
    session: AsyncSession, workload_id: str, *, limit: int = 100
) -> tuple[list[WorkloadEventRow], int]:
    """The last ``limit`` events of a workload, oldest first, and how many it has in all."""
    count = (
        await session.exec(
            select(func.count())
            .select_from(WorkloadEventRow)
            .where(WorkloadEventRow.workload_id == workload_id)
        )
    ).one()
    query = (
        select(WorkloadEventRow)
        .where(WorkloadEventRow.workload_id == workload_id)
        .order_by(col(WorkloadEventRow.id).desc())
        .limit(limit)
    )
    rows = list((await session.exec(query)).all())
    rows.reverse()
    return rows, int(count)
