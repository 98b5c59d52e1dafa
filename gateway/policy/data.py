"""The data the policies read (``data.ignara``), derived from the database."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlmodel import col, func, select
from sqlmodel.ext.asyncio.session import AsyncSession

from tenants.models import AuditEntry, ClusterQueueRow, ModelRow
from tenants.services.tenants import live_tenants

__all__ = [
    "CONFIG_KINDS",
    "CREDENTIAL_KINDS",
    "config_version",
    "credentials_version",
    "policy_data",
]

# Audited kinds of change that alter what the policies read.
CONFIG_KINDS = ("tenant", "cluster_queue", "cohort", "flavor", "setting", "model", "backend")
# Audited kinds of change that alter which credentials are good (a revoked key).
CREDENTIAL_KINDS = ("api_key",)


async def config_version(session: AsyncSession) -> int:
    """The newest audited config change: every change writes one entry."""
    return await _newest(session, CONFIG_KINDS)


async def credentials_version(session: AsyncSession) -> int:
    """The newest audited change to API keys (made, revoked, migrated)."""
    return await _newest(session, CREDENTIAL_KINDS)


async def _newest(session: AsyncSession, kinds: tuple[str, ...]) -> int:
    newest = (
        await session.exec(select(func.max(AuditEntry.id)).where(col(AuditEntry.kind).in_(kinds)))
    ).one()
    return int(newest or 0)


async def policy_data(session: AsyncSession, backends: Iterable[str]) -> dict[str, Any]:
    """Per live tenant (a deleted one is unknown, so refused everything): its queues,
    the flavors those queues offer, the backends there are, the models it may call;
    and each model's flavor."""
    queues = {q.name: q for q in (await session.exec(select(ClusterQueueRow))).all()}
    models = {m.name: m.spec["flavor"] for m in (await session.exec(select(ModelRow))).all()}
    tenants = {}
    for tenant in await live_tenants(session):
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
