"""The data the policies read (``data.ignara``), derived from the database."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlmodel import col, func, select
from sqlmodel.ext.asyncio.session import AsyncSession

from tenants.models import AuditEntry, ClusterQueueRow, ModelRow, Tenant

__all__ = ["CONFIG_KINDS", "config_version", "policy_data"]

# Audited kinds of change that alter what the policies read.
CONFIG_KINDS = ("tenant", "cluster_queue", "cohort", "flavor", "setting", "model")


async def config_version(session: AsyncSession) -> int:
    """The newest audited config change: every change writes one entry."""
    newest = (
        await session.exec(
            select(func.max(AuditEntry.id)).where(col(AuditEntry.kind).in_(CONFIG_KINDS))
        )
    ).one()
    return int(newest or 0)


async def policy_data(session: AsyncSession, backends: Iterable[str]) -> dict[str, Any]:
    """Per tenant: its queues, the flavors those queues offer, the backends there are,
    the models it may call; and each model's flavor."""
    queues = {q.name: q for q in (await session.exec(select(ClusterQueueRow))).all()}
    models = {m.name: m.spec["flavor"] for m in (await session.exec(select(ModelRow))).all()}
    tenants = {}
    for tenant in (await session.exec(select(Tenant))).all():
        flavors = sorted(
            {
                flavor["name"]
                for name in tenant.queues
                if name in queues
                for group in queues[name].spec.get("resource_groups", [])
                for flavor in group["flavors"]
            }
        )
        allowed = set(backends) if tenant.backends is None else set(tenant.backends) & set(backends)
        tenants[tenant.name] = {
            "suspended": False,
            "queues": sorted(tenant.queues),
            "flavors": flavors,
            "backends": sorted(allowed),
            "limits": dict(tenant.limits),
            "models": sorted(tenant.models if tenant.models is not None else models),
        }
    return {
        "ignara": {
            "tenants": tenants,
            "models": {name: {"flavor": flavor} for name, flavor in models.items()},
        }
    }
