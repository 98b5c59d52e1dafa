"""Tenants as the rest of the schema sees them: live ones, and their soft deletion.

A deleted tenant's row stays (workloads, usage records and audit entries name it), with
``deleted_at`` set; everything that asks which tenants exist asks :func:`live_tenants`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from tenants.errors import ConflictError, NotFoundError
from tenants.models import ApiKey, AuditEntry, Principal, Tenant, WorkloadRow
from tenants.models._base import utcnow

__all__ = [
    "HOLDING_STATES",
    "QUEUE_CLOSED",
    "TenantRemoval",
    "close_queues",
    "delete_tenant",
    "live_tenants",
    "live_tenants_page",
    "lock_live_tenant",
    "open_queues",
    "queue_closed_message",
]

# The pending reason of a workload whose queue is no longer open to its tenant.
QUEUE_CLOSED = "QueueClosed"

# Workload states in which a workload holds quota in its queue.
HOLDING_STATES = ("admitted", "running")


@dataclass(frozen=True)
class TenantRemoval:
    """What deleting a tenant did."""

    name: str
    keys_revoked: int
    principals_disabled: int
    workloads_cancelled: int


async def live_tenants(session: AsyncSession) -> Sequence[Tenant]:
    """Every tenant not deleted, by name."""
    query = select(Tenant).where(col(Tenant.deleted_at).is_(None)).order_by(col(Tenant.name))
    return (await session.exec(query)).all()


async def live_tenants_page(
    session: AsyncSession, *, after: str | None, limit: int
) -> tuple[Sequence[Tenant], str | None]:
    """Live tenants by name after ``after``, at most ``limit``; and the name to continue
    after, when there are more. Names are unique, so the order is stable across pages."""
    query = select(Tenant).where(col(Tenant.deleted_at).is_(None))
    if after is not None:
        query = query.where(col(Tenant.name) > after)
    rows = (await session.exec(query.order_by(col(Tenant.name)).limit(limit + 1))).all()
    page = rows[:limit]
    return page, (page[-1].name if len(rows) > limit else None)


async def open_queues(session: AsyncSession) -> dict[str, frozenset[str]]:
    """Per live tenant, the cluster queues it may use (a deleted tenant has none)."""
    return {t.name: frozenset(t.queues) for t in await live_tenants(session)}


def queue_closed_message(queue: str, tenant: str) -> str:
    return (
        f"cluster queue {queue!r} is no longer open to tenant {tenant!r}; it waits "
        "until the queue is open to it again, or is cancelled"
    )


async def close_queues(session: AsyncSession, tenant: str, queues: Collection[str]) -> None:
    """``queues`` are no longer ``tenant``'s: its pending workloads there say so, and
    their versions move, so an admission pass that read them before this commits
    fails its guarded write instead of admitting them."""
    for queue in queues:
        await session.exec(
            update(WorkloadRow)
            .where(
                col(WorkloadRow.tenant) == tenant,
                col(WorkloadRow.queue) == queue,
                col(WorkloadRow.state) == "pending",
            )
            .values(
                version=WorkloadRow.version + 1,
                updated_at=utcnow(),
                reason_code=QUEUE_CLOSED,
                reason_message=queue_closed_message(queue, tenant),
                reason_detail=None,
            )
        )


async def lock_live_tenant(session: AsyncSession, name: str) -> Tenant:
    """The live tenant ``name``, locked until the transaction ends, so it cannot be
    deleted meanwhile (a key issued under it would outlive it); raises
    ``NotFoundError``. A no-op write takes the lock on every database: the row lock on
    PostgreSQL (a concurrent deletion waits, or was seen), the write lock on SQLite."""
    result = await session.exec(
        update(Tenant)
        .where(col(Tenant.name) == name, col(Tenant.deleted_at).is_(None))
        .values(updated_at=Tenant.updated_at)
    )
    if result.rowcount != 1:
        raise NotFoundError(f"tenant {name!r} does not exist")
    query = select(Tenant).where(col(Tenant.name) == name)
    return (await session.exec(query.execution_options(populate_existing=True))).one()


async def delete_tenant(session: AsyncSession, name: str, *, actor: str) -> TenantRemoval:
    """Soft-delete a tenant, in the caller's transaction: its pending workloads are
    cancelled, its keys revoked, its principals disabled, all audited. Refused
    (``ConflictError``, nothing written) while it has admitted or running workloads;
    ``NotFoundError`` if there is no such live tenant."""
    now = utcnow()
    marked = await session.exec(
        update(Tenant)
        .where(col(Tenant.name) == name, col(Tenant.deleted_at).is_(None))
        .values(deleted_at=now, updated_at=now, version=Tenant.version + 1)
    )
    if marked.rowcount != 1:
        raise NotFoundError(f"tenant {name!r} does not exist")
    # Pending first: the admission loop's guarded writes then fail on these rows
    # instead of admitting one after the check below.
    pending = (col(WorkloadRow.tenant) == name) & (col(WorkloadRow.state) == "pending")
    # A preempted workload whose job is still stopping: the dispatcher stops it, then
    # cancels it (cancelled here, its job would run on, unseen).
    await session.exec(
        update(WorkloadRow)
        .where(pending, col(WorkloadRow.job_id).is_not(None))
        .values(
            cancel_requested=True,
            updated_at=now,
            version=WorkloadRow.version + 1,
            reason_code="Cancelling",
            reason_message=f"cancelling: tenant {name!r} was deleted by {actor}",
            reason_detail=None,
        )
    )
    cancelled = (
        await session.exec(
            update(WorkloadRow)
            .where(pending, col(WorkloadRow.job_id).is_(None))
            .values(
                state="cancelled",
                finished_at=now,
                updated_at=now,
                version=WorkloadRow.version + 1,
                reason_code="Cancelled",
                reason_message=f"cancelled: tenant {name!r} was deleted by {actor}",
                reason_detail=None,
            )
            .returning(col(WorkloadRow.id))
        )
    ).all()
    holding = (
        await session.exec(
            select(WorkloadRow.name).where(
                col(WorkloadRow.tenant) == name, col(WorkloadRow.state).in_(HOLDING_STATES)
            )
        )
    ).all()
    if holding:
        raise ConflictError(
            f"tenant {name!r} has admitted or running workloads "
            f"({', '.join(sorted(holding)[:5])}); finish or cancel them before deleting it"
        )
    revoked = (
        await session.exec(
            update(ApiKey)
            .where(col(ApiKey.tenant) == name, col(ApiKey.revoked_at).is_(None))
            .values(revoked_at=now)
            .returning(col(ApiKey.key_id))
        )
    ).all()
    disabled = await session.exec(
        update(Principal)
        .where(col(Principal.tenant) == name, col(Principal.disabled_at).is_(None))
        .values(disabled_at=now)
    )
    removal = TenantRemoval(name, len(revoked), disabled.rowcount, len(cancelled))
    reason = {"reason": f"tenant {name!r} deleted"}
    for workload_id in cancelled:
        _audit(session, actor, "cancel", "workload", str(workload_id), name, reason)
    for key_id in revoked:
        _audit(session, actor, "revoke", "api_key", str(key_id), name, reason)
    _audit(
        session,
        actor,
        "delete",
        "tenant",
        name,
        name,
        {
            "keys_revoked": removal.keys_revoked,
            "principals_disabled": removal.principals_disabled,
            "workloads_cancelled": removal.workloads_cancelled,
        },
    )
    return removal


def _audit(
    session: AsyncSession,
    actor: str,
    action: str,
    kind: str,
    name: str,
    tenant: str,
    detail: dict[str, Any],
) -> None:
    session.add(
        AuditEntry(actor=actor, action=action, kind=kind, name=name, tenant=tenant, detail=detail)
    )
