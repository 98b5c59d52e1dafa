"""The data the policies read (``data.ignara``), derived from the database."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlmodel import select
from sqlmodel.ext.asyncio.session import AsyncSession

from tenants.models import ClusterQueueRow, Tenant

__all__ = ["policy_data"]


async def policy_data(session: AsyncSession, backends: Iterable[str]) -> dict[str, Any]:
    """Per tenant: its queues, the flavors those queues offer, the backends there are."""
    queues = {q.name: q for q in (await session.exec(select(ClusterQueueRow))).all()}
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
        tenants[tenant.name] = {
            "suspended": False,
            "queues": sorted(tenant.queues),
            "flavors": flavors,
            "backends": sorted(backends),
        }
    return {"ignara": {"tenants": tenants}}
