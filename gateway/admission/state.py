"""Live quota state for the admin API: what each queue and cohort holds, borrows, lends
and has waiting, as the engine says.

Nothing here scans workloads on a request. The admission leader already rebuilds an
engine every pass (:mod:`gateway.admission.loop`); after a pass commits it hands that
engine to the :class:`LiveBoard`, which keeps it and turns it into a
:class:`LiveSummary` the first time someone asks (and at most once per pass). A replica
that does not lead has no pass of its own: it builds an engine from one snapshot of the
database, unscheduled (what is stored is what holds quota), at most once per
``max_age`` seconds however many requests come, and serves that meanwhile.

Amounts are the engine's tree units (milli-units; a budget's in milli-resource-seconds,
see :mod:`quota.budgets`); :func:`amount` turns them into what people read.

Lent, per level of the cohort tree (one cohort and its children), is Kueue's
arithmetic made explicit: what the children take above their own quota (``borrowed``),
less what the cohort itself takes from its parent, was supplied by the cohort's own
quota first and then by the children's unused lendable quota (``nominal - guaranteed``
of each, less what the child uses of it), apportioned in proportion to what each
child left unused. A sub-cohort's lending shows on the sub-cohort, not on its queues.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any

from gateway.admission.snapshot import ChargedLoader, Snapshot, aware, read_snapshot
from quota import QuotaEngine
from quota.budgets import is_budget, to_hours
from quota.cache import ClusterQueueNode, CohortNode
from quota.resources import MILLI, FlavorResource
from quota.tree import ResourceNode
from tenants import Database
from tenants.models import WorkloadRow

__all__ = [
    "CohortState",
    "Level",
    "LiveBoard",
    "LiveSummary",
    "Oldest",
    "QueueState",
    "amount",
    "summarize",
]


def amount(resource: str, value: int) -> int | float:
    """Tree units as people read them: a quantity (GPUs, cores), or hours of a budget."""
    exact = to_hours(value) if is_budget(resource) else Fraction(value, MILLI)
    return int(exact) if exact.denominator == 1 else round(float(exact), 6)


@dataclass(frozen=True)
class Level:
    """One flavor-resource of a queue or cohort, in tree units."""

    flavor: str
    resource: str
    nominal: int
    usage: int
    borrowed: int
    lent: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    subtree_nominal: int | None = None  # a cohort's own quota plus all below it
    charged: int | None = None  # a budget's: charged for runs ended this period
    committed: int | None = None  # a budget's: reserved by runs still going


@dataclass(frozen=True)
class Oldest:
    id: str
    created_at: datetime


@dataclass(frozen=True)
class QueueState:
    name: str
    cohort: str | None
    tenants: tuple[str, ...]
    admitted: int
    pending: int
    oldest_pending: Oldest | None
    levels: tuple[Level, ...]


@dataclass(frozen=True)
class CohortState:
    name: str
    parent: str | None
    cohorts: tuple[str, ...]
    queues: tuple[str, ...]  # every queue in its subtree
    admitted: int
    pending: int
    oldest_pending: Oldest | None
    levels: tuple[Level, ...]


@dataclass(frozen=True)
class LiveSummary:
    as_of: datetime
    source: str  # "leader": the last admission pass; "snapshot": read from the database
    queues: Mapping[str, QueueState]
    cohorts: Mapping[str, CohortState]
    # tenant -> the queues it may use
    opened: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # queue -> how many of its pending workloads wait in it though their tenant may no
    # longer use it (Kueue's "inadmissible"; the rest are "active")
    inadmissible: Mapping[str, int] = field(default_factory=dict)
    # What readers add up from this state (the platform's totals), kept with it: made
    # once per state, however many pages ask, and gone with it.
    derived: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def queues_of(self, tenant: str) -> list[str]:
        return sorted(q for q in self.opened.get(tenant, ()) if q in self.queues)


@dataclass(frozen=True)
class _Waiting:
    count: int = 0
    oldest: Oldest | None = None

    def add(self, other: _Waiting) -> _Waiting:
        oldest = min(
            (o for o in (self.oldest, other.oldest) if o is not None),
            key=lambda o: (o.created_at, o.id),
            default=None,
        )
        return _Waiting(self.count + other.count, oldest)


def summarize(
    engine: QuotaEngine,
    rows: Mapping[str, WorkloadRow],
    *,
    as_of: datetime,
    source: str,
    opened: Mapping[str, frozenset[str]],
    closed: Iterable[WorkloadRow] = (),
) -> LiveSummary:
    """The live state of ``engine``. Its pending workloads wait, and so do ``closed``
    (pending in a queue their tenant may no longer use, so not in the engine); ``rows``
    (by id) give the oldest one's creation time as stored."""
    state = engine.state
    closed = tuple(closed)
    waiting = _waiting(engine, rows, closed)
    lent = _lent(state.cohorts.values())
    budgets = engine.budgets()
    tenants: dict[str, list[str]] = {}
    for tenant, names in sorted(opened.items()):
        for name in names:
            tenants.setdefault(name, []).append(tenant)
    queues = {
        name: _queue_state(
            queue, waiting.get(name, _Waiting()), lent, budgets, tuple(tenants.get(name, ()))
        )
        for name, queue in sorted(state.queues.items())
    }
    cohorts = {
        name: _cohort_state(cohort, queues, lent, budgets)
        for name, cohort in sorted(state.cohorts.items())
    }
    inadmissible: dict[str, int] = {}
    for row in closed:
        if row.queue in queues:
            inadmissible[row.queue] = inadmissible.get(row.queue, 0) + 1
    return LiveSummary(as_of, source, queues, cohorts, dict(opened), inadmissible)


def _waiting(
    engine: QuotaEngine, rows: Mapping[str, WorkloadRow], closed: Iterable[WorkloadRow]
) -> dict[str, _Waiting]:
    """Per queue: how many wait, and the one waiting longest. From the engine's own
    workloads (plain objects: there may be a hundred thousand), rows only for the oldest."""
    known = engine.state.queues
    counts: dict[str, int] = {}
    oldest: dict[str, tuple[float, str]] = {}
    pending = [(w.cluster_queue, w.created, w.name) for w in engine.pending()]
    pending += [(r.queue, r.created_at.timestamp(), r.id) for r in closed]
    for queue, created, name in pending:
        if queue not in known:
            continue
        counts[queue] = counts.get(queue, 0) + 1
        key = (created, name)
        if queue not in oldest or key < oldest[queue]:
            oldest[queue] = key
    waiting = {}
    for queue, count in counts.items():
        name = oldest[queue][1]
        row = rows.get(name)
        first = None if row is None else Oldest(name, aware(row.created_at))
        waiting[queue] = _Waiting(count, first)
    return waiting


def _queue_state(
    queue: ClusterQueueNode,
    waiting: _Waiting,
    lent: Mapping[str, Mapping[FlavorResource, int]],
    budgets: Mapping[str, Mapping[FlavorResource, tuple[int, int]]],
    tenants: tuple[str, ...],
) -> QueueState:
    levels = []
    for fr in _frs(queue):
        quota = queue.quota(fr)
        used = queue.usage.get(fr, 0)
        charged, committed = budgets.get(queue.name, {}).get(fr, (None, None))
        levels.append(
            Level(
                fr.flavor,
                fr.resource,
                nominal=quota.nominal,
                usage=used,
                borrowed=max(0, used - quota.nominal),
                lent=lent.get(queue.name, {}).get(fr, 0),
                borrowing_limit=quota.borrowing_limit,
                lending_limit=quota.lending_limit,
                charged=charged,
                committed=committed,
            )
        )
    cohort = queue.cohort
    return QueueState(
        queue.name,
        cohort.name if cohort is not None else None,
        tenants,
        len(queue.admitted),
        waiting.count,
        waiting.oldest,
        tuple(levels),
    )


def _cohort_state(
    cohort: CohortNode,
    queues: Mapping[str, QueueState],
    lent: Mapping[str, Mapping[FlavorResource, int]],
    budgets: Mapping[str, Mapping[FlavorResource, tuple[int, int]]],
) -> CohortState:
    below = sorted(_queues_under(cohort))
    nominal: dict[FlavorResource, int] = {fr: q.nominal for fr, q in cohort.quotas.items()}
    usage: dict[FlavorResource, int] = {}
    waiting = _Waiting()
    admitted = 0
    for name in below:
        queue = queues[name]
        admitted += queue.admitted
        waiting = waiting.add(_Waiting(queue.pending, queue.oldest_pending))
        for level in queue.levels:
            fr = FlavorResource(level.flavor, level.resource)
            nominal[fr] = nominal.get(fr, 0) + level.nominal
            usage[fr] = usage.get(fr, 0) + level.usage
    levels = []
    for fr in sorted(nominal.keys() | usage.keys(), key=lambda k: (k.flavor, k.resource)):
        quota = cohort.quota(fr)
        charged, committed = budgets.get(cohort.name, {}).get(fr, (None, None))
        levels.append(
            Level(
                fr.flavor,
                fr.resource,
                nominal=quota.nominal,
                usage=usage.get(fr, 0),
                borrowed=_borrowed(cohort, fr),
                lent=lent.get(cohort.name, {}).get(fr, 0),
                borrowing_limit=quota.borrowing_limit,
                lending_limit=quota.lending_limit,
                subtree_nominal=nominal.get(fr, 0),
                charged=charged,
                committed=committed,
            )
        )
    parent = cohort.cohort
    return CohortState(
        cohort.name,
        parent.name if parent is not None else None,
        tuple(sorted(c.name for c in cohort.child_cohorts)),
        tuple(below),
        admitted,
        waiting.count,
        waiting.oldest,
        tuple(levels),
    )


def _frs(node: ResourceNode) -> list[FlavorResource]:
    return sorted(node.quotas.keys() | node.usage.keys(), key=lambda k: (k.flavor, k.resource))


def _queues_under(cohort: CohortNode) -> Iterable[str]:
    stack = [cohort]
    while stack:
        node = stack.pop()
        yield from (q.name for q in node.child_queues)
        stack.extend(node.child_cohorts)


def _borrowed(node: ResourceNode, fr: FlavorResource) -> int:
    """What a node takes above its own quota: a queue's usage past its nominal; a
    cohort's draw on its parent past what its subtree puts in."""
    return max(0, node.usage.get(fr, 0) - node.subtree_quota.get(fr, 0))


def _lent(cohorts: Iterable[CohortNode]) -> dict[str, dict[FlavorResource, int]]:
    """Per child of each cohort: how much of its unused lendable quota others use."""
    lent: dict[str, dict[FlavorResource, int]] = {}
    for cohort in cohorts:
        children = list(cohort.children())
        frs = {fr for child in children for fr in child.subtree_quota}
        for fr in frs:
            taken = sum(_borrowed(child, fr) for child in children) - _borrowed(cohort, fr)
            taken -= min(max(0, taken), cohort.quota(fr).nominal)
            if taken <= 0:
                continue
            idle = {child.name: _idle(child, fr) for child in children}
            for name, share in _apportion(taken, idle).items():
                if share:
                    lent.setdefault(name, {})[fr] = share
    return lent


def _idle(child: ResourceNode, fr: FlavorResource) -> int:
    """The part of what a child lends its cohort that it does not use itself."""
    guaranteed = child.guaranteed.get(fr, 0)
    lendable = child.subtree_quota.get(fr, 0) - guaranteed
    return max(0, lendable - max(0, child.usage.get(fr, 0) - guaranteed))


def _apportion(total: int, weights: Mapping[str, int]) -> dict[str, int]:
    """``total`` (at most the sum of the weights) split in proportion to them, in whole
    units (largest remainders get the rest; ties by name)."""
    whole = sum(weights.values())
    if whole <= 0:
        return {}
    total = min(total, whole)
    shares = {name: total * w // whole for name, w in weights.items()}
    rest = total - sum(shares.values())
    order = sorted(weights, key=lambda n: (-(total * weights[n] % whole), n))
    for name in order[:rest]:
        shares[name] += 1
    return shares


# -- publishing -----------------------------------------------------------------------


@dataclass
class _Published:
    at: float
    max_age: float
    build: Callable[[], LiveSummary]
    source: str = "leader"
    summary: LiveSummary | None = None


class LiveBoard:
    """The latest live summary of this process: the leader's last pass, or (not leading)
    a snapshot of the database at most ``max_age`` seconds old."""

    def __init__(
        self,
        database: Database,
        *,
        charged: ChargedLoader | None = None,
        max_age: float = 2.0,
        leader_max_age: float = 10.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.database = database
        self.charged = charged
        self.max_age = max_age
        # A pass may take longer than ``max_age`` under load: its last state is served
        # meanwhile rather than a second read of the database by the same process.
        self.leader_max_age = leader_max_age
        self._monotonic = monotonic
        self._latest: _Published | None = None
        self._reading = asyncio.Lock()
        self._snapshot: tuple[Snapshot, Any] | None = None

    def remember(self, snapshot: Snapshot, marker: Any) -> None:
        """The snapshot the leader's last committed pass decided on, and the marker
        (:func:`gateway.admission.changes.read_marker`) read before it."""
        self._snapshot = (snapshot, marker)

    def snapshot_as_of(self, marker: Any) -> Snapshot | None:
        """The leader's last snapshot if nothing it holds has changed since (``marker``
        read now equals the one it was read under), else ``None``: a preview decides on
        it instead of reading a hundred thousand rows again."""
        if self._snapshot is not None and self._snapshot[1] == marker:
            return self._snapshot[0]
        return None

    def publish(
        self,
        engine: QuotaEngine,
        rows: Mapping[str, WorkloadRow],
        *,
        as_of: datetime,
        opened: Mapping[str, frozenset[str]],
        closed: Sequence[WorkloadRow] = (),
        source: str = "leader",
    ) -> None:
        """Keep ``engine`` (no longer changed by its owner) as the state now; it is
        summarized only when asked for (see :func:`summarize`)."""
        self._latest = _Published(
            self._monotonic(),
            self.leader_max_age if source == "leader" else self.max_age,
            lambda: summarize(
                engine, rows, as_of=as_of, source=source, opened=opened, closed=closed
            ),
            source,
        )

    def keep(self) -> None:
        """The leader's last pass still holds (nothing it read has changed since): serve
        it as fresh rather than reading the database again."""
        latest = self._latest
        if latest is not None and latest.source == "leader":
            latest.at = self._monotonic()

    def _fresh(self) -> _Published | None:
        latest = self._latest
        if latest is not None and self._monotonic() - latest.at <= latest.max_age:
            return latest
        return None

    async def current(self) -> LiveSummary:
        fresh = self._fresh()
        if fresh is not None and fresh.summary is not None:
            return fresh.summary
        async with self._reading:  # one read, one summary, for every waiting request
            fresh = self._fresh()
            if fresh is None:
                await self._read()
                fresh = self._latest
                assert fresh is not None
            if fresh.summary is None:
                # A tenth of a second with a hundred thousand pending: off the event
                # loop (the engine is no longer changed, so a thread may read it).
                fresh.summary = await asyncio.to_thread(fresh.build)
            return fresh.summary

    async def published(self) -> LiveSummary | None:
        """The leader's last pass, if this process leads and it is fresh; never a read
        of the database (for the metrics: a scrape of a replica that does not lead
        reports no quota state, as Kueue's do not)."""
        fresh = self._fresh()
        if fresh is None or fresh.source != "leader":
            return None
        if fresh.summary is None:
            async with self._reading:
                if fresh.summary is None:
                    fresh.summary = await asyncio.to_thread(fresh.build)
        return fresh.summary

    async def _read(self) -> None:
        snapshot = await read_snapshot(self.database, charged=self.charged)
        closed = snapshot.closed()
        engine, _ = await snapshot.build_engine(skip=frozenset(row.id for row in closed))
        self.publish(
            engine,
            snapshot.by_id,
            as_of=snapshot.now,
            opened=snapshot.opened,
            closed=closed,
            source="snapshot",
        )
