"""Live quota state: the cohort tree, admitted workloads and their usage.

Like Kueue's ``pkg/cache/scheduler``, this owns what holds quota; pending
workloads live in :mod:`quota.queues`. Usage is kept incrementally: admitting
or releasing a workload touches only the nodes on its queue's path to the root.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from quota.model import Admission, ClusterQueueSpec, CohortSpec, QuotaConfig, Workload, iter_quotas
from quota.resources import FlavorResource
from quota.tree import ResourceNode, add_usage, remove_usage

__all__ = ["AdmittedWorkload", "ClusterQueueNode", "ClusterState", "CohortNode"]


@dataclass(slots=True)
class AdmittedWorkload:
    """A workload holding quota: where, how much, and since when."""

    workload: Workload
    admission: Admission
    usage: dict[FlavorResource, int]
    admitted_at: float

    @property
    def name(self) -> str:
        return self.workload.name

    @property
    def priority(self) -> int:
        return self.workload.priority


class CohortNode(ResourceNode):
    __slots__ = ("child_cohorts", "child_queues", "height", "spec")

    def __init__(self, spec: CohortSpec) -> None:
        super().__init__(
            spec.name, dict(iter_quotas(spec.resource_groups)), float(spec.fair_weight)
        )
        self.spec = spec
        self.child_cohorts: list[CohortNode] = []
        self.child_queues: list[ClusterQueueNode] = []
        self.height = 0  # distance to the furthest leaf below (Kueue's getNodeHeight)

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
    __slots__ = ("admitted", "group_of", "spec")

    def __init__(self, spec: ClusterQueueSpec) -> None:
        super().__init__(
            spec.name, dict(iter_quotas(spec.resource_groups)), float(spec.fair_weight)
        )
        self.spec = spec
        self.admitted: dict[str, AdmittedWorkload] = {}
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

    @classmethod
    def build(cls, config: QuotaConfig) -> ClusterState:
        state = cls(config)
        for spec in config.cohorts:
            state.cohorts[spec.name] = CohortNode(spec)
        # A cohort named only as a parent or by a queue exists implicitly, with no quota.
        for spec in config.cohorts:
            if spec.parent is not None:
                state._link_cohort(state.cohorts[spec.name], state._cohort(spec.parent))
        for qspec in config.cluster_queues:
            queue = ClusterQueueNode(qspec)
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
            self.cohorts[name] = CohortNode(CohortSpec(name=name))
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

    def generation(self, queue: ClusterQueueNode) -> int:
        return self.generations.get(id(self.root_of(queue)), 0)

    def admit(self, record: AdmittedWorkload) -> None:
        queue = self.attach(record)
        root = id(self.root_of(queue))
        self.generations[root] = self.generations.get(root, 0) + 1

    def release(self, name: str) -> AdmittedWorkload:
        record = self.admitted[name]
        queue = self.detach(record)
        root = id(self.root_of(queue))
        self.generations[root] = self.generations.get(root, 0) + 1
        return record

    def attach(self, record: AdmittedWorkload) -> ClusterQueueNode:
        """Make ``record`` hold its quota (no generation change: for simulations)."""
        queue = self.queues[record.admission.cluster_queue]
        queue.admitted[record.name] = record
        self.admitted[record.name] = record
        self.charge(queue, record.usage)
        return queue

    def detach(self, record: AdmittedWorkload) -> ClusterQueueNode:
        """Undo :meth:`attach`."""
        queue = self.queues[record.admission.cluster_queue]
        del queue.admitted[record.name]
        del self.admitted[record.name]
        self.refund(queue, record.usage)
        return queue

    @contextmanager
    def without(self, records: Iterable[AdmittedWorkload]) -> Iterator[None]:
        """Simulate that ``records`` hold no quota, then put them back."""
        gone = list(records)
        for record in gone:
            self.detach(record)
        try:
            yield
        finally:
            for record in reversed(gone):
                self.attach(record)

    @staticmethod
    def charge(queue: ClusterQueueNode, usage: dict[FlavorResource, int]) -> None:
        for fr, amount in usage.items():
            add_usage(queue, fr, amount)

    @staticmethod
    def refund(queue: ClusterQueueNode, usage: dict[FlavorResource, int]) -> None:
        for fr, amount in usage.items():
            remove_usage(queue, fr, amount)


def _set_subtree_quotas(cohort: CohortNode) -> None:
    """Post-order: children first, so a cohort sums finished subtrees."""
    height = min(len(cohort.child_cohorts) + len(cohort.child_queues), 1)
    for child in cohort.child_cohorts:
        _set_subtree_quotas(child)
        height = max(height, child.height + 1)
    cohort.height = height
    cohort.set_subtree_quota(cohort.children())
