"""``GET /api/v1/admin/summary``: the whole platform in one small answer, for a
dashboard that must not fetch a thousand queues to show a dozen numbers.

Computed from the same live state as ``/queues`` and ``/cohorts``
(:class:`gateway.admission.state.LiveBoard`: the admission leader's last pass), never
from a scan per request, and once per state however many ask (it is kept beside the
summary it was computed from). Platform admins only: it totals every tenant's queues.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from litestar import Controller, Request, get
from litestar.di import NamedDependency

from gateway.admin.live import _board
from gateway.admission.state import LiveSummary, amount
from gateway.auth import Identity
from gateway.authorization import authorize
from gateway.openapi import errors
from gateway.services import Services
from tenants.services.usage import tenant_tokens_since

__all__ = ["PlatformSummary", "SummaryController", "summarize_platform"]

TOP = 10
"""How many queues the busiest lists name."""


class ResourceTotal(msgspec.Struct):
    """One flavor and resource over every queue and cohort: quantities (GPUs, cores),
    or hours for a budget."""

    flavor: str
    resource: str
    capacity: float  # every queue's nominal quota plus the cohorts' own
    usage: float  # what admitted workloads hold
    borrowed: float  # what queues hold above their own nominal quota (from their cohorts)
    queues: int  # how many queues have quota or usage of it


class QueueCount(msgspec.Struct):
    name: str
    cohort: str | None
    tenants: list[str]
    admitted: int
    pending: int


class TenantTokens(msgspec.Struct):
    tenant: str
    tokens: int


class PlatformSummary(msgspec.Struct):
    as_of: datetime
    source: str  # "leader" (the last admission pass) or "snapshot" (read from the database)
    tenants: int  # live tenants
    queues: int
    cohorts: int
    flavors: int
    admitted: int  # workloads holding quota, over every queue
    pending: int  # workloads waiting, over every queue (inadmissible ones too)
    inadmissible: int  # of those, waiting in a queue their tenant may no longer use
    resources: list[ResourceTotal]
    most_pending: list[QueueCount]  # the queues with most waiting (up to TOP)
    most_admitted: list[QueueCount]  # the queues with most admitted (up to TOP)
    # Inference in the last minute (the usage records, not the leader's pass): tokens
    # over every tenant, and the tenants that used most (up to TOP).
    tokens_last_minute: int = 0
    top_tenants_last_minute: list[TenantTokens] = msgspec.field(default_factory=list)


def summarize_platform(summary: LiveSummary) -> PlatformSummary:
    """The totals of ``summary``: each queue's levels added up; capacity also counts
    each cohort's own quota (what it holds beyond its children's). Made once per state
    (kept in its ``derived``)."""
    kept = summary.derived.get("platform")
    if isinstance(kept, PlatformSummary):
        return kept
    totals: dict[tuple[str, str], list[int]] = {}  # capacity, usage, borrowed, queues
    for queue in summary.queues.values():
        for level in queue.levels:
            total = totals.setdefault((level.flavor, level.resource), [0, 0, 0, 0])
            total[0] += level.nominal
            total[1] += level.usage
            total[2] += level.borrowed
            total[3] += 1
    for cohort in summary.cohorts.values():
        for level in cohort.levels:
            if level.nominal:
                totals.setdefault((level.flavor, level.resource), [0, 0, 0, 0])[0] += level.nominal
    resources = [
        ResourceTotal(
            flavor,
            resource,
            amount(resource, capacity),
            amount(resource, usage),
            amount(resource, borrowed),
            queues,
        )
        for (flavor, resource), (capacity, usage, borrowed, queues) in sorted(totals.items())
    ]
    counts = [
        QueueCount(q.name, q.cohort, list(q.tenants), q.admitted, q.pending)
        for q in summary.queues.values()
    ]
    flavors = {flavor for flavor, _ in totals}
    result = PlatformSummary(
        as_of=summary.as_of,
        source=summary.source,
        tenants=len(summary.opened),
        queues=len(summary.queues),
        cohorts=len(summary.cohorts),
        flavors=len(flavors),
        admitted=sum(q.admitted for q in counts),
        pending=sum(q.pending for q in counts),
        inadmissible=sum(summary.inadmissible.values()),
        resources=resources,
        most_pending=_top(counts, "pending"),
        most_admitted=_top(counts, "admitted"),
    )
    summary.derived["platform"] = result
    return result


def _top(counts: list[QueueCount], field: str) -> list[QueueCount]:
    def key(count: QueueCount) -> tuple[Any, ...]:
        return (-getattr(count, field), count.name)

    return [c for c in sorted(counts, key=key)[:TOP] if getattr(c, field) > 0]


class SummaryController(Controller):
    path = "/api/v1/admin"
    tags = ["admin"]

    @get("/summary", operation_id="GetPlatformSummary", responses=errors(403))
    async def summary(
        self, request: Request[Identity, Any, Any], services: NamedDependency[Services]
    ) -> PlatformSummary:
        """Totals over every queue and cohort, per flavor and resource (capacity, usage,
        borrowed), the admitted and pending counts, and the queues with most waiting and
        most admitted: the live state of ``/queues``, added up; and the tokens of the
        last minute's inference calls, in all and per tenant (platform admins only)."""
        await authorize(services.policy, request.user, "admin.live.read")
        totals = summarize_platform(await _board(services).current())
        since = datetime.now(UTC) - timedelta(minutes=1)
        async with services.database.snapshot() as session:
            spent = await tenant_tokens_since(session, since)
        return msgspec.structs.replace(
            totals,
            tokens_last_minute=sum(tokens for _, tokens in spent),
            top_tenants_last_minute=[TenantTokens(t, n) for t, n in spent[:TOP]],
        )
