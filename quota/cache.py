"""Live quota state: the cohort tree, admitted workloads and their usage.

Like Kueue's ``pkg/cache/scheduler``, this owns what holds quota; pending
workloads live in :mod:`quota.queues`. Usage is kept incrementally: admitting
or releasing a workload touches only the nodes on its queue's path to the root.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import attrgetter, itemgetter

from quota.budgets import (
    budgets_of,
    is_budget,
    metered,
    needs_budget,
    overlap_seconds,
    scale_quota,
    strip_budgets,
    use,
    with_budgets,
)
from quota.model import (
    Admission,
    ClusterQueueSpec,
    CohortSpec,
    QuotaConfig,
    ResourceGroup,
    ResourceQuota,
    Workload,
    iter_quotas,
)
from quota.periods import period_end, period_start, seconds_between
from quota.resources import FlavorResource
from quota.tree import ResourceNode, add_usage, lineage, remove_usage

__all__ = [
    "AdmittedWorkload",
    "ClusterQueueNode",
    "ClusterState",
    "CohortNode",
    "Freed",
    "victim_order",
]

_name = attrgetter("name")

VictimKey = tuple[int, float, str]
_victim_key = itemgetter(0)


@dataclass(slots=True)
class AdmittedWorkload:
    """A workload holding quota: where, how much, and since when."""

    workload: Workload
    admission: Admission
    usage: dict[FlavorResource, int]
    admitted_at: float
    # When its run began on the budget clock (what its GPU-hours are counted from).
    started: datetime | None = None

    def __init__(  # written out: see quota/__init__.py, "Hot classes"
        self,
        workload: Workload,
        admission: Admission,
        usage: dict[FlavorResource, int],
        admitted_at: float,
        started: datetime | None = None,
    ) -> None:
        self.workload = workload
        self.admission = admission
        self.usage = usage
        self.admitted_at = admitted_at
        self.started = started

    @property
    def name(self) -> str:
        return self.workload.name

    @property
    def priority(self) -> int:
        return self.workload.priority


Victim = tuple[VictimKey, AdmittedWorkload]  # an entry of ``ClusterQueueNode.victims``


def victim_order(record: AdmittedWorkload) -> VictimKey:
    """Preemption's order of candidates: lower priority first, then the most recently
    admitted, then by name."""
    return (record.priority, -record.admitted_at, record.name)


class CohortNode(ResourceNode):
    __slots__ = ("_by_name", "child_cohorts", "child_queues", "height", "spec")

    def __init__(self, spec: CohortSpec, keys: dict[FlavorResource, FlavorResource]) -> None:
        super().__init__(spec.name, _quotas(spec.resource_groups, keys), float(spec.fair_weight))
        self.spec = spec
        self.child_cohorts: list[CohortNode] = []
        self.child_queues: list[ClusterQueueNode] = []
        self.height = 0  # distance to the furthest leaf below (Kueue's getNodeHeight)
        self._by_name: tuple[list[CohortNode], list[ClusterQueueNode]] | None = None

    def by_name(self) -> tuple[list[CohortNode], list[ClusterQueueNode]]:
        """The child cohorts and the child queues, each sorted by name (as fair sharing
        visits them). Kept: a tree's shape is fixed once built."""
        kept = self._by_name
        if kept is None:
            kept = self._by_name = (
                sorted(self.child_cohorts, key=_name),
                sorted(self.child_queues, key=_name),
            )
        return kept

    @property
    def cohort(self) -> CohortNode | None:
        """The parent cohort (``parent`` typed as a cohort)."""
        parent = self.parent
        assert parent is None or isinstance(parent, CohortNode)
        return parent

    def children(self) -> Iterator[ResourceNode]:
        yield from self.child_cohorts
        yield from self.child_queues


class ClusterQueueNode(ResourceNode):
    __slots__ = (
        "admitted",
        "admitted_version",
        "budget_resources",
        "budgets",
        "flavor_resources",
        "group_of",
        "spec",
        "victims",
    )

    def __init__(self, spec: ClusterQueueSpec, keys: dict[FlavorResource, FlavorResource]) -> None:
        super().__init__(spec.name, _quotas(spec.resource_groups, keys), float(spec.fair_weight))
        self.spec = spec
        self.budgets = budgets_of(spec)  # metered resource -> budget resource
        self.budget_resources = frozenset(self.budgets.values())
        # flavor -> resource -> the key its quota is held under: built once, since every
        # flavor scan would otherwise make one per flavor and resource it tries.
        self.flavor_resources: dict[str, dict[str, FlavorResource]] = {}
        for fr in self.quotas:
            self.flavor_resources.setdefault(fr.flavor, {})[fr.resource] = fr
        self.admitted: dict[str, AdmittedWorkload] = {}
        # Bumped whenever ``admitted`` changes (simulations, ``ClusterState.freed``,
        # leave it be), so what is derived from it can be kept until it does.
        self.admitted_version = 0
        # ``admitted`` in :func:`victim_order`, kept as workloads are admitted and
        # released (not by ``attach``/``detach``: a simulation puts back what it takes),
        # so the preemption searches never sort a queue's workloads.
        self.victims: list[Victim] = []
        self.group_of = {
            resource: index
            for index, group in enumerate(spec.resource_groups)
            for resource in group.resources
        }

    @property
    def cohort(self) -> CohortNode | None:
        parent = self.parent
        assert parent is None or isinstance(parent, CohortNode)
        return parent

    def is_borrowing(self, fr: FlavorResource | None = None) -> bool:
        """Using more than its nominal quota (for one flavor-resource, or any)."""
        if fr is not None:
            return self.usage.get(fr, 0) > self.quota(fr).nominal
        return any(amount > self.quota(key).nominal for key, amount in self.usage.items())


@dataclass
class ClusterState:
    """Every queue and cohort of one configuration, with the workloads holding quota."""

    config: QuotaConfig
    queues: dict[str, ClusterQueueNode] = field(default_factory=dict)
    cohorts: dict[str, CohortNode] = field(default_factory=dict)
    admitted: dict[str, AdmittedWorkload] = field(default_factory=dict)
    # Bumped on every admission or release in a tree (by id of its root): Kueue's
    # allocatable-resource generation, which tells a stale flavor scan apart.
    generations: dict[int, int] = field(default_factory=dict)
    # Per tree (by id of its root) and flavor-resource, the tick of the last admission
    # or release that held it; a new budget period moves every one (``_floor``). What
    # a preemption search for room in one flavor-resource reads stands while it does.
    _versions: dict[int, dict[FlavorResource, int]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _ticks: int = field(default=0, repr=False, compare=False)
    _floor: int = field(default=0, repr=False, compare=False)
    _period: tuple[datetime, datetime] | None = field(default=None, repr=False, compare=False)
    # The budget clock, and what each queue was charged this period (tree units).
    now: datetime = datetime(2026, 11, 1, tzinfo=UTC)
    charged: dict[str, dict[FlavorResource, int]] = field(default_factory=dict)
    # The names of the queues in each tree (by id of its root); the shape is fixed.
    _tree_queues: dict[int, frozenset[str]] = field(default_factory=dict, repr=False, compare=False)
    # One key object per flavor-resource for every node's quotas (and so for what the
    # flavor assigner charges): a dict finds an identical key without comparing
    # tuples, and usage is looked up along every path to the root all the time.
    _keys: dict[FlavorResource, FlavorResource] = field(
        default_factory=dict, repr=False, compare=False
    )

    @classmethod
    def build(cls, config: QuotaConfig) -> ClusterState:
        state = cls(config)
        for spec in config.cohorts:
            state.cohorts[spec.name] = CohortNode(spec, state._keys)
        # A cohort named only as a parent or by a queue exists implicitly, with no quota.
        for spec in config.cohorts:
            if spec.parent is not None:
                state._link_cohort(state.cohorts[spec.name], state._cohort(spec.parent))
        for qspec in config.cluster_queues:
            queue = ClusterQueueNode(qspec, state._keys)
            state.queues[qspec.name] = queue
            if qspec.cohort is not None:
                cohort = state._cohort(qspec.cohort)
                queue.parent = cohort
                cohort.child_queues.append(queue)
        for queue in state.queues.values():
            queue.set_subtree_quota(())
        for root in state.roots():
            _set_subtree_quotas(root)
        return state

    def _cohort(self, name: str) -> CohortNode:
        if name not in self.cohorts:
            self.cohorts[name] = CohortNode(CohortSpec(name=name), self._keys)
        return self.cohorts[name]

    @staticmethod
    def _link_cohort(child: CohortNode, parent: CohortNode) -> None:
        child.parent = parent
        parent.child_cohorts.append(child)

    def roots(self) -> list[CohortNode]:
        return [c for c in self.cohorts.values() if c.parent is None]

    def root_of(self, node: ResourceNode) -> ResourceNode:
        while node.parent is not None:
            node = node.parent
        return node

    def queues_under(self, node: ResourceNode) -> Iterator[ClusterQueueNode]:
        """Every cluster queue in the subtree of ``node`` (itself, if a queue)."""
        if isinstance(node, ClusterQueueNode):
            yield node
            return
        assert isinstance(node, CohortNode)
        stack = [node]
        while stack:
            cohort = stack.pop()
            yield from cohort.child_queues
            stack.extend(cohort.child_cohorts)

    def tree_queue_names(self, queue: ClusterQueueNode) -> frozenset[str]:
        """The names of every queue in ``queue``'s tree, itself included."""
        root = self.root_of(queue)
        names = self._tree_queues.get(id(root))
        if names is None:
            names = self._tree_queues[id(root)] = frozenset(q.name for q in self.queues_under(root))
        return names

    def generation(self, queue: ClusterQueueNode) -> int:
        return self.generations.get(id(self.root_of(queue)), 0)

    def usage_version(self, queue: ClusterQueueNode, fr: FlavorResource) -> int:
        """Moves whenever a workload using ``fr`` is admitted or released in the
        queue's tree, or a budget period begins: while it stands, so do the usage of
        ``fr`` in the tree and the workloads there that use it."""
        tree = self._versions.get(id(lineage(queue)[0]))
        version = 0 if tree is None else tree.get(fr, 0)
        return version if version > self._floor else self._floor

    def _moved(self, queue: ClusterQueueNode, record: AdmittedWorkload) -> None:
        root = id(lineage(queue)[0])
        self.generations[root] = self.generations.get(root, 0) + 1
        self._ticks = ticks = self._ticks + 1
        tree = self._versions.get(root)
        if tree is None:
            tree = self._versions[root] = {}
        for fr in record.usage:
            tree[fr] = ticks

    def admit(self, record: AdmittedWorkload) -> None:
        queue = self.attach(record)
        # Keys are unique (they end with the name): the record is never compared.
        bisect.insort(queue.victims, (victim_order(record), record), key=_victim_key)
        self._moved(queue, record)

    def release(self, name: str) -> AdmittedWorkload:
        """The workload's run ends now: its quota and commitment are released, and
        what it really used of each budget this period is charged."""
        record = self.admitted[name]
        queue = self.detach(record)
        victims = queue.victims
        del victims[bisect.bisect_left(victims, victim_order(record), key=_victim_key)]
        for fr, amount in self.run_use(record).items():
            self.charge_budget(queue, fr, amount)
        self._moved(queue, record)
        return record

    # -- budgets -------------------------------------------------------------------------

    def run_use(self, record: AdmittedWorkload) -> dict[FlavorResource, int]:
        """What the run of ``record`` used of each budget this period, were it to end
        now: its request of the metered resource x its time inside the period."""
        budgets = [fr for fr in record.usage if is_budget(fr.resource)]
        if record.started is None or not budgets:
            return {}
        ran = seconds_between(record.started, self.now)
        seconds = overlap_seconds(record.started, ran, self.config.budget_period, self.now)
        return {
            fr: use(record.usage.get(FlavorResource(fr.flavor, metered(fr.resource)), 0), seconds)
            for fr in budgets
        }

    def charge_budget(self, queue: ClusterQueueNode, fr: FlavorResource, amount: int) -> None:
        """Charge a queue for budget used this period (a run that ended)."""
        if amount <= 0:
            return
        charged = self.charged.setdefault(queue.name, {})
        charged[fr] = charged.get(fr, 0) + amount
        add_usage(queue, fr, amount)

    def with_budgets(self, workload: Workload, started: datetime | None = None) -> Workload:
        """``workload`` asking, besides its resources, for the budget a run started at
        ``started`` (default: now) commits this period; unchanged if it needs none.
        Raises ``LookupError`` when it needs budget but has no max runtime."""
        queue = self.queues[workload.cluster_queue]
        if not needs_budget(workload, queue.budgets):
            return workload
        runtime = workload.max_runtime or queue.spec.default_max_runtime
        if runtime is None:
            raise LookupError(workload.name)
        return with_budgets(
            workload,
            queue.budgets,
            runtime,
            self.now if started is None else started,
            self.config.budget_period,
            self.now,
        )

    def _same_period(self, moment: datetime) -> bool:
        """Is ``moment`` in the budget period of ``now``? The period's bounds are kept
        (the clock advances at every event of a replay, within one period mostly)."""
        kind, now = self.config.budget_period, self.now
        if moment.tzinfo is None or now.tzinfo is None:  # not comparable with the bounds
            return period_start(kind, moment) == period_start(kind, now)
        bounds = self._period
        if bounds is None or not bounds[0] <= now < bounds[1]:
            bounds = self._period = (period_start(kind, now), period_end(kind, now))
        return bounds[0] <= moment < bounds[1]

    def advance(self, moment: datetime) -> bool:
        """Move the budget clock to ``moment``; returns whether a new period began
        (charges restart at zero, and running workloads commit what is left of their
        max runtime inside it)."""
        rolled = not self._same_period(moment)
        self.now = moment
        if not rolled:
            return False
        for name, charged in self.charged.items():
            self.refund(self.queues[name], charged)
        self.charged.clear()
        for record in list(self.admitted.values()):
            if record.started is None or not any(is_budget(fr.resource) for fr in record.usage):
                continue
            self.detach(record)
            record.workload = self.with_budgets(strip_budgets(record.workload), record.started)
            record.usage = record.admission.usage(record.workload)
            self.attach(record)
        for root in self.roots():
            self.generations[id(root)] = self.generations.get(id(root), 0) + 1
        self._ticks += 1
        self._floor = self._ticks
        return True

    def budget_levels(self) -> dict[str, dict[FlavorResource, tuple[int, int]]]:
        """For each queue and cohort with a budget below it: per budget flavor-resource,
        (charged, committed) this period, a cohort's summed over its subtree."""
        levels: dict[str, dict[FlavorResource, tuple[int, int]]] = {}
        for queue in self.queues.values():
            frs = [fr for fr in queue.quotas if is_budget(fr.resource)]
            if not frs:
                continue
            charged = self.charged.get(queue.name, {})
            mine = levels.setdefault(queue.name, {})
            for fr in frs:
                committed = sum(r.usage.get(fr, 0) for r in queue.admitted.values())
                mine[fr] = (charged.get(fr, 0), committed)
            node = queue.cohort
            while node is not None:
                totals = levels.setdefault(node.name, {})
                for fr in frs:
                    before = totals.get(fr, (0, 0))
                    totals[fr] = (before[0] + mine[fr][0], before[1] + mine[fr][1])
                node = node.cohort
        return levels

    def attach(self, record: AdmittedWorkload) -> ClusterQueueNode:
        """Make ``record`` hold its quota (no generation change: for simulations)."""
        queue = self.queues[record.admission.cluster_queue]
        queue.admitted[record.name] = record
        queue.admitted_version += 1
        self.admitted[record.name] = record
        self.charge(queue, record.usage)
        return queue

    def detach(self, record: AdmittedWorkload) -> ClusterQueueNode:
        """Undo :meth:`attach`."""
        queue = self.queues[record.admission.cluster_queue]
        del queue.admitted[record.name]
        queue.admitted_version += 1
        del self.admitted[record.name]
        self.refund(queue, record.usage)
        return queue

    def freed(
        self,
        records: Iterable[AdmittedWorkload],
        frs: Collection[FlavorResource],
        *,
        ended: bool = False,
    ) -> Freed:
        """A context in which ``records`` hold none of ``frs`` (and, if ``ended``, have
        their real use of each budget among ``frs`` charged); then put back.

        Only usage changes (no admitted maps, no versions: nothing a search keeps goes
        stale), and only of ``frs``, by one sum per queue. A sum leaves every node as
        detaching one record at a time would: what a node stores in its parent is a
        function of its own usage, so the changes telescope."""
        budgets = [fr for fr in frs if is_budget(fr.resource)] if ended else []
        sums: dict[str, dict[FlavorResource, int]] = {}
        for record in records:
            mine = sums.setdefault(record.admission.cluster_queue, {})
            usage = record.usage
            for fr in frs:
                amount = usage.get(fr, 0)
                if amount:
                    mine[fr] = mine.get(fr, 0) - amount
            if budgets:
                spent = self.run_use(record)
                for fr in budgets:
                    mine[fr] = mine.get(fr, 0) + spent.get(fr, 0)
        queues = self.queues
        return Freed(
            [
                (queues[name], fr, amount)
                for name, mine in sums.items()
                for fr, amount in mine.items()
                if amount
            ]
        )

    @staticmethod
    def charge(queue: ClusterQueueNode, usage: dict[FlavorResource, int]) -> None:
        for fr, amount in usage.items():
            add_usage(queue, fr, amount)

    @staticmethod
    def refund(queue: ClusterQueueNode, usage: dict[FlavorResource, int]) -> None:
        for fr, amount in usage.items():
            remove_usage(queue, fr, amount)


# A context manager written as a class, not with @contextmanager: the scheduler's fit
# checks and simulations enter it all the time, and contextlib's are interpreted
# Python even when the engine is compiled.


class Freed:
    """:meth:`ClusterState.freed`: each change applied in turn, undone in reverse; as a
    context, or kept applied for a while (:meth:`apply`, then :meth:`undo`)."""

    __slots__ = ("changes",)

    def __init__(self, changes: list[tuple[ClusterQueueNode, FlavorResource, int]]) -> None:
        self.changes = changes

    def __enter__(self) -> None:
        self.apply()

    def __exit__(self, *exc: object) -> None:
        self.undo()

    def apply(self) -> None:
        for queue, fr, amount in self.changes:
            if amount > 0:
                add_usage(queue, fr, amount)
            else:
                remove_usage(queue, fr, -amount)

    def undo(self) -> None:
        for queue, fr, amount in reversed(self.changes):
            if amount > 0:
                remove_usage(queue, fr, amount)
            else:
                add_usage(queue, fr, -amount)


def _quotas(
    groups: tuple[ResourceGroup, ...], keys: dict[FlavorResource, FlavorResource]
) -> dict[FlavorResource, ResourceQuota]:
    quotas = {}
    for fr, quota in iter_quotas(groups):
        quotas[keys.setdefault(fr, fr)] = scale_quota(fr.resource, quota)
    return quotas


def _set_subtree_quotas(cohort: CohortNode) -> None:
    """Post-order: children first, so a cohort sums finished subtrees."""
    height = min(len(cohort.child_cohorts) + len(cohort.child_queues), 1)
    for child in cohort.child_cohorts:
        _set_subtree_quotas(child)
        height = max(height, child.height + 1)
    cohort.height = height
    cohort.set_subtree_quota(cohort.children())
