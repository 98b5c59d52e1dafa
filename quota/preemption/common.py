"""What classical and fair-sharing preemption share: policies, targets, the fit test."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from quota.cache import AdmittedWorkload, ClusterQueueNode, ClusterState
from quota.model import Workload
from quota.resources import FlavorResource
from quota.tree import ResourceNode, queue_available

__all__ = [
    "PreemptionReason",
    "PreemptionRequest",
    "Rankings",
    "Target",
    "fill_back",
    "is_within_nominal",
    "restore",
    "satisfies_policy",
    "simulate_removal",
    "workload_fits",
]


R = TypeVar("R")


class Rankings(Generic[R]):
    """What the searches build from a queue's admitted workloads (its victims using some
    flavor-resources, in order), kept per queue and flavor-resources for as long as the
    queue's ``admitted_version`` stands. A queue's rankings go stale together; stale
    ones are never read, but they hold the records of the workloads they ranked, so
    :meth:`sweep` drops them (a step per queue ranked)."""

    def __init__(self) -> None:
        self._by_queue: dict[str, tuple[int, dict[frozenset[FlavorResource], R]]] = {}

    def get(self, queue: ClusterQueueNode, frs: frozenset[FlavorResource]) -> R | None:
        kept = self._by_queue.get(queue.name)
        if kept is None or kept[0] != queue.admitted_version:
            return None
        return kept[1].get(frs)

    def put(self, queue: ClusterQueueNode, frs: frozenset[FlavorResource], ranking: R) -> R:
        kept = self._by_queue.get(queue.name)
        if kept is None or kept[0] != queue.admitted_version:
            kept = self._by_queue[queue.name] = (queue.admitted_version, {})
        kept[1][frs] = ranking
        return ranking

    def sweep(self, queues: Mapping[str, ClusterQueueNode]) -> None:
        self._by_queue = {
            name: kept
            for name, kept in self._by_queue.items()
            if kept[0] == queues[name].admitted_version
        }


class PreemptionReason(StrEnum):
    IN_CLUSTER_QUEUE = "InClusterQueue"
    IN_COHORT_RECLAMATION = "InCohortReclamation"
    IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
    IN_COHORT_FAIR_SHARING = "InCohortFairSharing"


@dataclass(slots=True, unsafe_hash=True)  # a value: never changed once built
class Target:
    record: AdmittedWorkload
    reason: PreemptionReason

    def __init__(self, record: AdmittedWorkload, reason: PreemptionReason) -> None:
        # Written out: see quota/__init__.py, "Hot classes".
        self.record = record
        self.reason = reason

    @property
    def name(self) -> str:
        return self.record.name


@dataclass(slots=True)
class PreemptionRequest:
    """A workload that needs room: its queue, its whole usage, and the flavor-resources
    in which it must preempt."""

    workload: Workload
    queue: ClusterQueueNode
    usage: Mapping[FlavorResource, int]
    needs_preemption: frozenset[FlavorResource]

    def __init__(  # written out: see quota/__init__.py, "Hot classes"
        self,
        workload: Workload,
        queue: ClusterQueueNode,
        usage: Mapping[FlavorResource, int],
        needs_preemption: frozenset[FlavorResource],
    ) -> None:
        self.workload = workload
        self.queue = queue
        self.usage = usage
        self.needs_preemption = needs_preemption


def satisfies_policy(preemptor: Workload, candidate: Workload, policy: str) -> bool:
    """Kueue's ``SatisfiesPreemptionPolicy``: may ``preemptor`` evict ``candidate``?"""
    lower = candidate.priority < preemptor.priority
    if policy == "LowerPriority":
        return lower
    if policy == "LowerOrNewerEqualPriority":
        newer = (
            candidate.priority == preemptor.priority and preemptor.order_time < candidate.order_time
        )
        return lower or newer
    return policy == "Any"


def is_within_nominal(node: ResourceNode, frs: Iterable[FlavorResource]) -> bool:
    """Usage at or below the node's (subtree) quota in every one of ``frs``."""
    usage, quota = node.usage, node.subtree_quota
    return all(usage.get(fr, 0) <= quota.get(fr, 0) for fr in frs)


def workload_fits(request: PreemptionRequest, allow_borrowing: bool) -> bool:
    """Would the whole workload fit now (after simulated removals)?"""
    queue = request.queue
    for fr, amount in request.usage.items():
        if not allow_borrowing and queue.usage.get(fr, 0) + amount > queue.quota(fr).nominal:
            return False
        if amount > queue_available(queue, fr):
            return False
    return True


def simulate_removal(state: ClusterState, record: AdmittedWorkload) -> None:
    state.refund(state.queues[record.admission.cluster_queue], record.usage)


def restore(state: ClusterState, records: Iterable[AdmittedWorkload]) -> None:
    for record in records:
        state.charge(state.queues[record.admission.cluster_queue], record.usage)


def fill_back(
    state: ClusterState, request: PreemptionRequest, targets: list[Target], allow_borrowing: bool
) -> list[Target]:
    """Give back, newest removal first, every target the workload can do without.

    The last target (the one that made the workload fit) always stays."""
    for i in range(len(targets) - 2, -1, -1):
        record = targets[i].record
        state.charge(state.queues[record.admission.cluster_queue], record.usage)
        if workload_fits(request, allow_borrowing):
            targets[i] = targets[-1]
            targets.pop()
        else:
            simulate_removal(state, record)
    return targets
