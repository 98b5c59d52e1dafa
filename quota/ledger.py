"""Token quotas for inference: rates and budgets over the cohort tree.

Rate resources (``tokens-per-minute``, ``requests-per-minute``) count what was
reserved in the last 60 seconds; budget resources (``tokens-per-day``,
``tokens-per-month``) count what was reserved in the current UTC day or month.
Either way, the amount in the window or period is the *usage* of the same
quota arithmetic as GPUs (:mod:`quota.tree`): nominal quota, borrowing through
the cohort tree up to a borrowing limit, lending limits.

A call reserves its estimate for every resource at once, over its queue and
every cohort above it, or nothing; afterwards it reconciles with what it really
used. Each reservation remembers how much it charged to each node, so a refund
or an expiry takes back exactly that.
"""

from __future__ import annotations

import calendar
import heapq
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from quota.cache import ClusterState
from quota.model import QuotaConfig
from quota.reasons import blocker_for
from quota.resources import FlavorResource
from quota.tree import ResourceNode, add_usage, path_to_root, queue_available, remove_usage

__all__ = [
    "BUDGET_RESOURCES",
    "RATE_RESOURCES",
    "InProcessLedger",
    "Refusal",
    "Reservation",
    "period_end",
]

RATE_WINDOW_SECONDS = 60.0
RATE_RESOURCES = frozenset({"tokens-per-minute", "requests-per-minute"})
BUDGET_RESOURCES = frozenset({"tokens-per-day", "tokens-per-month"})


def period_end(resource: str, now: float) -> float:
    """When what is reserved now stops counting."""
    if resource in RATE_RESOURCES:
        return now + RATE_WINDOW_SECONDS
    moment = datetime.fromtimestamp(now, UTC)
    if resource == "tokens-per-day":
        start = moment.replace(hour=0, minute=0, second=0, microsecond=0)
        return start.timestamp() + 86400
    if resource == "tokens-per-month":
        days = calendar.monthrange(moment.year, moment.month)[1]
        start = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        return start.timestamp() + days * 86400
    raise ValueError(f"{resource!r} is not a rate or budget resource")


@dataclass(frozen=True)
class Refusal:
    """Why a reservation did not fit: which level, resource and when to retry."""

    level: str  # ClusterQueue | Cohort
    name: str
    resource: str
    flavor: str
    requested: int
    available: int
    retry_after: float  # seconds until enough of the window has passed


@dataclass
class Reservation:
    id: int
    queue: str
    flavor: str
    amounts: dict[str, int]
    expires: dict[str, float]
    # (depth on the queue's path to the root, resource) -> amount charged to that node
    charges: dict[tuple[int, str], int] = field(default_factory=dict)


class InProcessLedger:
    """One process's ledger: exact, not shared between replicas (Redis is)."""

    def __init__(self, config: QuotaConfig) -> None:
        self.state = ClusterState.build(config)
        self._ids = itertools.count(1)
        self._live: dict[int, Reservation] = {}
        self._expiry: list[tuple[float, int, str]] = []  # heap of (when, reservation, resource)

    def reserve(
        self, queue: str, flavor: str, amounts: Mapping[str, int], now: float
    ) -> Reservation | Refusal:
        """Reserve every amount at once, or none (the first resource that does not fit)."""
        self._expire(now)
        node = self.state.queues[queue]
        for resource, amount in amounts.items():
            fr = FlavorResource(flavor, resource)
            free = queue_available(node, fr)
            if amount > free:
                return self._refusal(node, fr, amount, free, now)
        reservation = Reservation(next(self._ids), queue, flavor, dict(amounts), {})
        for resource, amount in amounts.items():
            self._charge(reservation, node, FlavorResource(flavor, resource), amount)
            expires = period_end(resource, now)
            reservation.expires[resource] = expires
            heapq.heappush(self._expiry, (expires, reservation.id, resource))
        self._live[reservation.id] = reservation
        return reservation

    def reconcile(self, reservation: Reservation, actual: Mapping[str, int], now: float) -> None:
        """Replace the estimate by what was used: refund the difference, or charge it
        (an overrun is charged even past the quota: it has happened)."""
        self._expire(now)
        if reservation.id not in self._live:
            return  # its window passed already: nothing left to correct
        node = self.state.queues[reservation.queue]
        for resource, estimate in reservation.amounts.items():
            used = actual.get(resource, estimate)
            fr = FlavorResource(reservation.flavor, resource)
            if used != estimate:
                self._charge(reservation, node, fr, used - estimate)
            reservation.amounts[resource] = used

    def usage(self, queue: str, flavor: str, resource: str, now: float) -> int:
        self._expire(now)
        return self.state.queues[queue].usage.get(FlavorResource(flavor, resource), 0)

    def available(self, queue: str, flavor: str, resource: str, now: float) -> int:
        self._expire(now)
        return queue_available(self.state.queues[queue], FlavorResource(flavor, resource))

    # -- internals -----------------------------------------------------------------------

    def _charge(
        self, reservation: Reservation, queue: ResourceNode, fr: FlavorResource, amount: int
    ) -> None:
        """Charge (or with a negative amount refund) and remember what each node got."""
        path = path_to_root(queue)
        before = [node.usage.get(fr, 0) for node in path]
        if amount >= 0:
            add_usage(queue, fr, amount)
        else:
            remove_usage(queue, fr, -amount)
        for depth, (node, old) in enumerate(zip(path, before, strict=True)):
            key = (depth, fr.resource)
            reservation.charges[key] = reservation.charges.get(key, 0) + node.usage.get(fr, 0) - old

    def _expire(self, now: float) -> None:
        while self._expiry and self._expiry[0][0] <= now:
            _, reservation_id, resource = heapq.heappop(self._expiry)
            reservation = self._live.get(reservation_id)
            if reservation is None:
                continue
            fr = FlavorResource(reservation.flavor, resource)
            # Take back exactly what was charged to each node.
            for depth, node in enumerate(path_to_root(self.state.queues[reservation.queue])):
                charged = reservation.charges.pop((depth, resource), 0)
                node.usage[fr] = node.usage.get(fr, 0) - charged
            del reservation.expires[resource]
            if not reservation.expires:
                del self._live[reservation_id]

    def _refusal(
        self, queue: ResourceNode, fr: FlavorResource, amount: int, free: int, now: float
    ) -> Refusal:
        blocker = blocker_for(queue, fr, amount)
        return Refusal(
            level=blocker.level.value,
            name=blocker.name,
            resource=fr.resource,
            flavor=fr.flavor,
            requested=amount,
            available=free,
            retry_after=self._retry_after(fr, amount - free, now),
        )

    def _retry_after(self, fr: FlavorResource, short: int, now: float) -> float:
        """Seconds until reservations holding at least ``short`` of ``fr`` expire."""
        freed = 0
        for when, reservation_id, resource in sorted(self._expiry):
            reservation = self._live.get(reservation_id)
            if reservation is None or resource != fr.resource or reservation.flavor != fr.flavor:
                continue
            freed += reservation.amounts.get(resource, 0)
            if freed >= short:
                return max(0.0, when - now)
        return max(0.0, period_end(fr.resource, now) - now)
