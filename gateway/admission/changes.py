"""Has anything the admission pass decides on changed since the last pass?

A pass over a hundred thousand workloads costs seconds of the event loop's time (read
every live row, rebuild the engine, run it to quiet), and most passes of an idle
gateway decide nothing new. One aggregate statement tells whether the rows a pass reads
moved: per table, how many rows, the sum of their versions and the newest
``updated_at``. Every change a pass must see bumps a row's version (workloads through
:func:`tenants.services.workloads.update_if_unchanged`, a cancel, a queue closed to a
tenant; config objects on every change by the admin API or a config apply), adds a row
or removes one. What a pass writes itself without a version (pending reasons) does not
count: it is advice, rewritten only when the pass's answer changes, which needs a
change above first.

Time alone can change a decision too (a budget period rolling over, GPU-hours charged
as runs go on), so the caller still runs a full pass every so often however quiet it
is (:class:`gateway.admission.runtime.AdmissionRuntime`'s ``idle_pass_interval``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func
from sqlmodel import SQLModel, col, select

from tenants import Database
from tenants.models import WorkloadRow
from tenants.models.quota import ClusterQueueRow, CohortRow, FlavorRow
from tenants.models.tenant import Tenant
from tenants.services import HOLDING_STATES

__all__ = ["Marker", "read_marker"]

Marker = tuple[Any, ...]
"""Opaque; two equal markers mean nothing a pass reads changed in between."""

_CONFIG_TABLES: tuple[type[SQLModel], ...] = (FlavorRow, CohortRow, ClusterQueueRow, Tenant)


async def read_marker(database: Database) -> Marker:
    """The marker as of now: one round trip per table, no rows brought back."""
    live = ("pending", *HOLDING_STATES)
    parts: list[Any] = []
    async with database.session() as session:
        workloads = select(
            func.count(),
            func.coalesce(func.sum(col(WorkloadRow.version)), 0),
            func.max(col(WorkloadRow.updated_at)),
        ).where(col(WorkloadRow.state).in_(live))
        parts.append(tuple((await session.exec(workloads)).one()))
        for table in _CONFIG_TABLES:
            version = table.version  # type: ignore[attr-defined]
            updated = table.updated_at  # type: ignore[attr-defined]
            statement = select(
                func.count(), func.coalesce(func.sum(version), 0), func.max(updated)
            ).select_from(table)
            parts.append(tuple((await session.exec(statement)).one()))
    return tuple(parts)
