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

A call may also be charged to its API key's own level below the queue
(:class:`KeyCharge`): the key's limits are plain caps, with no borrowing, counted
over the same windows and periods, and a reservation must fit them and the tree
at once, or nothing is taken from either.

A refusal says when the call would fit if nothing else were reserved meanwhile:
for a rate, the expiry of the earliest reservations whose charges to the nodes on
the queue's path free enough there (reservations elsewhere in the tree, or charged
to nodes that do not bind, do not count); for a budget, the period's end.
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
    "KEY_LEVEL",
    "KEY_RESOURCES",
    "RATE_RESOURCES",
    "RATE_WINDOW_SECONDS",
    "RETRY_WALK_LIMIT",
    "InProcessLedger",
    "KeyCharge",
    "Refusal",
    "Reservation",
    "full_reset_after",
    "period_end",
]

RATE_WINDOW_SECONDS = 60.0
RATE_RESOURCES = frozenset({"tokens-per-minute", "requests-per-minute"})
BUDGET_RESOURCES = frozenset({"tokens-per-day", "tokens-per-month"})
# A refusal's retry_after walks at most this many of the earliest reservations before
# falling back to the window's end: the walk stays cheap when a window is crowded.
# The Redis ledger walks the same number, so both give the same answers.
RETRY_WALK_LIMIT = 1000
# What an API key may limit of its own, and the level a refusal by its limit names.
KEY_RESOURCES = ("tokens-per-minute", "tokens-per-day")
KEY_LEVEL = "Key"


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


def full_reset_after(resource: str, now: float) -> float:
    """Seconds until everything reserved by ``now`` stops counting: the window's length
    for a rate, the rest of the period for a budget. Right after a grant that is when
    the queue's remaining is back at its limit if nothing more is reserved (the grant's
    own reservation is the last to go)."""
    return max(0.0, period_end(resource, now) - now)


@dataclass(frozen=True)
class Refusal:
    """Why a reservation did not fit: which level, resource and when to retry.

    The resource named is the one that fits last; ``retry_after`` is when every
    requested resource fits, if nothing else is reserved meanwhile."""

    level: str  # ClusterQueue | Cohort | Key (the API key's own limit: name is its id)
    name: str
    resource: str
    flavor: str
    requested: int
    available: int
    retry_after: float  # seconds until the call fits (the largest of ``reset_after``)
    # per requested resource: what the queue (for a Key refusal: the key) may take now,
    # and seconds until the call's amount of it fits (0 if it fits now), for the
    # x-ratelimit-* headers
    remaining: dict[str, int] = field(default_factory=dict)
    reset_after: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class KeyCharge:
    """A call's charge to its API key's own level: per limited resource (of
    :data:`KEY_RESOURCES`), the most the key may hold and what this call takes."""

    key: str
    limits: Mapping[str, int]
    amounts: Mapping[str, int]


@dataclass
class Reservation:
    id: int
    queue: str
    flavor: str
    amounts: dict[str, int]
    expires: dict[str, float]
    # (depth on the queue's path to the root, resource) -> amount charged to that node
    charges: dict[tuple[int, str], int] = field(default_factory=dict)
    # the key level: which key, what it holds of each resource and until when
    key: str | None = None
    key_amounts: dict[str, int] = field(default_factory=dict)
    key_expires: dict[str, float] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return bool(self.expires or self.key_expires)


class InProcessLedger:
    """One process's ledger: exact, not shared between replicas (Redis is)."""

    def __init__(self, config: QuotaConfig) -> None:
        self.state = ClusterState.build(config)
        self._ids = itertools.count(1)
        self._live: dict[int, Reservation] = {}
        # per flavor-resource, a heap of (when it expires, reservation id)
        self._expiry: dict[FlavorResource, list[tuple[float, int]]] = {}
        # The key level: per (key, resource) what its reservations hold, and their ids;
        # one heap of (when it expires, reservation id, resource) for every key.
        self._key_usage: dict[tuple[str, str], int] = {}
        self._key_live: dict[tuple[str, str], set[int]] = {}
        self._key_expiry: list[tuple[float, int, str]] = []

    def reserve(
        self,
        queue: str,
        flavor: str,
        amounts: Mapping[str, int],
        now: float,
        key: KeyCharge | None = None,
    ) -> Reservation | Refusal:
        """Reserve every amount at once, or none: over the queue's path and, given
        ``key``, within the key's own limits too."""
        self._expire(now)
        node = self.state.queues[queue]
        free = {r: queue_available(node, FlavorResource(flavor, r)) for r in amounts}
        key_free = {} if key is None else {r: self.key_available(key, r) for r in key.amounts}
        if any(amount > free[resource] for resource, amount in amounts.items()) or (
            key is not None and any(a > max(0, key_free[r]) for r, a in key.amounts.items())
        ):
            return self._refusal(node, flavor, amounts, free, now, key, key_free)
        return self._book(node, flavor, amounts, now, key)

    def key_available(self, key: KeyCharge, resource: str) -> int:
        """What the key may still take of ``resource`` (may be negative after an overrun)."""
        return key.limits[resource] - self._key_usage.get((key.key, resource), 0)

    def key_usage(self, key: str, resource: str, now: float) -> int:
        self._expire(now)
        return self._key_usage.get((key, resource), 0)

    def charge_spent(
        self, queue: str, flavor: str, amounts: Mapping[str, int], now: float
    ) -> Reservation:
        """Charge what was spent before this ledger knew of it (budgets restored after a
        restart), even past the quota: it has happened. It ends with the period."""
        self._expire(now)
        return self._book(self.state.queues[queue], flavor, amounts, now)

    def charge_key_spent(self, key: str, amounts: Mapping[str, int], now: float) -> Reservation:
        """Charge a key's level with what it spent before this ledger knew of it (its
        day's budget restored after a restart), however far past its limits."""
        self._expire(now)
        charge = KeyCharge(key, dict.fromkeys(amounts, 0), amounts)
        reservation = Reservation(next(self._ids), "", "", {}, {})
        self._book_key(reservation, charge, now)
        self._live[reservation.id] = reservation
        return reservation

    def reconcile(self, reservation: Reservation, actual: Mapping[str, int], now: float) -> None:
        """Replace the estimate by what was used: refund the difference, or charge it
        (an overrun is charged even past the quota: it has happened)."""
        self._expire(now)
        if reservation.id not in self._live:
            return  # its window passed already: nothing left to correct
        node = self.state.queues.get(reservation.queue)
        for resource, estimate in reservation.amounts.items():
            if resource not in reservation.expires or node is None:
                # Expired already: its charges were taken back, a correction would stay forever.
                continue
            used = actual.get(resource, estimate)
            fr = FlavorResource(reservation.flavor, resource)
            if used != estimate:
                self._charge(reservation, node, fr, used - estimate)
            reservation.amounts[resource] = used
        if reservation.key is not None:
            for resource, estimate in reservation.key_amounts.items():
                if resource in reservation.key_expires:
                    used = actual.get(resource, estimate)
                    at = (reservation.key, resource)
                    self._key_usage[at] = self._key_usage.get(at, 0) + used - estimate
                    reservation.key_amounts[resource] = used

    def usage(self, queue: str, flavor: str, resource: str, now: float) -> int:
        self._expire(now)
        return self.state.queues[queue].usage.get(FlavorResource(flavor, resource), 0)

    def cohort_usage(self, cohort: str, flavor: str, resource: str, now: float) -> int:
        """What the cohort's subtree takes from the pool above its guaranteed parts."""
        self._expire(now)
        return self.state.cohorts[cohort].usage.get(FlavorResource(flavor, resource), 0)

    def available(self, queue: str, flavor: str, resource: str, now: float) -> int:
        self._expire(now)
        return queue_available(self.state.queues[queue], FlavorResource(flavor, resource))

    def rebuild(self, config: QuotaConfig, now: float) -> None:
        """Adopt a new quota configuration without forgetting what is live.

        What expired by ``now`` goes first (so it takes no guaranteed quota from
        the rest); then the tree is built afresh and every live reservation's
        current amounts are charged into it again, oldest first, recording new
        charges. A reservation whose queue is gone is dropped (and its expiry
        entries with it): nothing could charge or refund it any more.
        """
        self._expire(now)
        self.state = ClusterState.build(config)
        for reservation_id in sorted(self._live):
            reservation = self._live[reservation_id]
            node = self.state.queues.get(reservation.queue)
            if node is None:
                reservation.expires.clear()
                reservation.charges.clear()
                if not reservation.live:  # its key level, if any, counts on
                    del self._live[reservation_id]
                continue
            reservation.charges = {}
            for resource in reservation.expires:
                fr = FlavorResource(reservation.flavor, resource)
                self._charge(reservation, node, fr, reservation.amounts[resource])
        for fr, heap in self._expiry.items():
            heap[:] = [entry for entry in heap if self._counts(entry[1], fr)]
            heapq.heapify(heap)

    # -- internals -----------------------------------------------------------------------

    def _book(
        self,
        node: ResourceNode,
        flavor: str,
        amounts: Mapping[str, int],
        now: float,
        key: KeyCharge | None = None,
    ) -> Reservation:
        reservation = Reservation(next(self._ids), node.name, flavor, dict(amounts), {})
        for resource, amount in amounts.items():
            fr = FlavorResource(flavor, resource)
            self._charge(reservation, node, fr, amount)
            expires = period_end(resource, now)
            reservation.expires[resource] = expires
            heapq.heappush(self._expiry.setdefault(fr, []), (expires, reservation.id))
        if key is not None:
            self._book_key(reservation, key, now)
        self._live[reservation.id] = reservation
        return reservation

    def _book_key(self, reservation: Reservation, key: KeyCharge, now: float) -> None:
        reservation.key = key.key
        for resource, amount in key.amounts.items():
            at = (key.key, resource)
            self._key_usage[at] = self._key_usage.get(at, 0) + amount
            self._key_live.setdefault(at, set()).add(reservation.id)
            expires = period_end(resource, now)
            reservation.key_amounts[resource] = amount
            reservation.key_expires[resource] = expires
            heapq.heappush(self._key_expiry, (expires, reservation.id, resource))

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
        for fr, heap in self._expiry.items():
            while heap and heap[0][0] <= now:
                _, reservation_id = heapq.heappop(heap)
                reservation = self._live.get(reservation_id)
                if reservation is not None and fr.resource in reservation.expires:
                    self._take_back(reservation, fr)
        keys = self._key_expiry
        while keys and keys[0][0] <= now:
            _, reservation_id, resource = heapq.heappop(keys)
            reservation = self._live.get(reservation_id)
            if reservation is not None and resource in reservation.key_expires:
                self._take_back_key(reservation, resource)

    def _take_back(self, reservation: Reservation, fr: FlavorResource) -> None:
        """Expire one resource of a reservation: take back exactly what each node got."""
        for depth, node in enumerate(path_to_root(self.state.queues[reservation.queue])):
            charged = reservation.charges.pop((depth, fr.resource), 0)
            node.usage[fr] = node.usage.get(fr, 0) - charged
        del reservation.expires[fr.resource]
        if not reservation.live:
            del self._live[reservation.id]

    def _take_back_key(self, reservation: Reservation, resource: str) -> None:
        assert reservation.key is not None
        at = (reservation.key, resource)
        left = self._key_usage.get(at, 0) - reservation.key_amounts[resource]
        ids = self._key_live[at]
        ids.discard(reservation.id)
        if ids:
            self._key_usage[at] = left
        else:  # an idle key costs nothing
            del self._key_usage[at], self._key_live[at]
        del reservation.key_expires[resource]
        if not reservation.live:
            del self._live[reservation.id]

    def _counts(self, reservation_id: int, fr: FlavorResource) -> bool:
        """Whether the reservation still holds some of ``fr`` (its entry is not stale)."""
        reservation = self._live.get(reservation_id)
        return reservation is not None and fr.resource in reservation.expires

    def _refusal(
        self,
        queue: ResourceNode,
        flavor: str,
        amounts: Mapping[str, int],
        free: dict[str, int],
        now: float,
        key: KeyCharge | None = None,
        key_free: dict[str, int] | None = None,
    ) -> Refusal:
        """Name the resource that fits last (the first of those that fit equally late),
        the key's resources after the queue's; ``retry_after`` is when all of them fit."""
        waits = {
            resource: self._time_to_fit(queue, FlavorResource(flavor, resource), amount, now)
            if amount > free[resource]
            else 0.0
            for resource, amount in amounts.items()
        }
        key_waits: dict[str, float] = {}
        key_short: list[str] = []
        if key is not None and key_free is not None:
            key_short = [r for r, amount in key.amounts.items() if amount > max(0, key_free[r])]
            key_waits = {
                r: self._key_time_to_fit(key, r, key.amounts[r], now) if r in key_short else 0.0
                for r in key.amounts
            }
        short = [r for r, amount in amounts.items() if amount > free[r]]
        queue_wait = max((waits[r] for r in short), default=-1.0)
        key_wait = max((key_waits[r] for r in key_short), default=-1.0)
        # The queue's resources come first: of levels that fit equally late, it is named.
        if key is not None and key_free is not None and key_wait > queue_wait:
            resource = max(key_short, key=key_waits.__getitem__)
            return Refusal(
                level=KEY_LEVEL,
                name=key.key,
                resource=resource,
                flavor=flavor,
                requested=key.amounts[resource],
                available=max(0, key_free[resource]),
                retry_after=key_wait,
                remaining={r: max(0, v) for r, v in key_free.items()},
                reset_after=key_waits,
            )
        resource = max(short, key=waits.__getitem__)
        fr = FlavorResource(flavor, resource)
        blocker = blocker_for(queue, fr, amounts[resource])
        return Refusal(
            level=blocker.level.value,
            name=blocker.name,
            resource=resource,
            flavor=flavor,
            requested=amounts[resource],
            available=free[resource],
            retry_after=max(queue_wait, key_wait),
            remaining=dict(free),
            reset_after=waits,
        )

    def _key_time_to_fit(self, key: KeyCharge, resource: str, amount: int, now: float) -> float:
        """Seconds until ``amount`` fits the key's limit if nothing else is reserved: for
        the rate, walk the key's earliest :data:`RETRY_WALK_LIMIT` reservations in
        expiry order; past them (or for the budget) the window's or the period's end."""
        if resource in RATE_RESOURCES:
            at = (key.key, resource)
            held = self._key_usage.get(at, 0)
            live = [self._live[rid] for rid in self._key_live.get(at, ())]
            entries = heapq.nsmallest(
                RETRY_WALK_LIMIT, ((r.key_expires[resource], r.id, r) for r in live)
            )
            for when, _, reservation in entries:
                held -= reservation.key_amounts[resource]
                if key.limits[resource] - held >= amount:
                    return max(0.0, when - now)
        return full_reset_after(resource, now)

    def _time_to_fit(
        self, queue: ResourceNode, fr: FlavorResource, amount: int, now: float
    ) -> float:
        """Seconds until ``amount`` of ``fr`` fits in ``queue`` if nothing else is reserved.

        For a rate: walk the earliest :data:`RETRY_WALK_LIMIT` live reservations of
        ``fr`` (of any queue) in expiry order, taking back what each charged to a node
        on the queue's path, until what the queue may take covers ``amount``. A
        reservation elsewhere in the tree changes nothing here, and one in the same
        cohort frees only what it charged to the shared nodes. Past the walk (or for a
        budget) it is the window's or the period's end, when everything held now is gone.
        """
        if fr.resource in RATE_RESOURCES:
            path = path_to_root(queue)
            depth_of = {id(node): depth for depth, node in enumerate(path)}
            usage = [node.usage.get(fr, 0) for node in path]
            for when, reservation_id in heapq.nsmallest(RETRY_WALK_LIMIT, self._expiry.get(fr, [])):
                reservation = self._live.get(reservation_id)
                if reservation is None or fr.resource not in reservation.expires:
                    continue
                freed = False
                for depth, node in enumerate(path_to_root(self.state.queues[reservation.queue])):
                    charged = reservation.charges.get((depth, fr.resource), 0)
                    at = depth_of.get(id(node))
                    if charged and at is not None:
                        usage[at] -= charged
                        freed = True
                if freed and _available_along(path, fr, usage) >= amount:
                    return max(0.0, when - now)
        return full_reset_after(fr.resource, now)


def _available_along(path: list[ResourceNode], fr: FlavorResource, usage: list[int]) -> int:
    """:func:`quota.tree.available` of ``path[0]`` were ``usage[d]`` the usage of
    ``path[d]`` (the path from a queue to the root): the same arithmetic on usage that
    is not the tree's (as ``available_along`` in lua/common.lua)."""
    total = path[-1].subtree_quota.get(fr, 0) - usage[-1]
    for depth in range(len(path) - 2, -1, -1):
        node = path[depth]
        used = usage[depth]
        guaranteed = node.guaranteed.get(fr, 0)
        quota = node.quotas.get(fr)
        if quota is not None and quota.borrowing_limit is not None:
            stored_in_parent = node.subtree_quota.get(fr, 0) - guaranteed
            total = min(total, stored_in_parent - max(0, used - guaranteed) + quota.borrowing_limit)
        total += max(0, guaranteed - used)
    return total
