"""Kueue's classical preemption, the straightforward way: the reference for
:mod:`quota.preemption.classical`, which must choose exactly the same targets
(``tests/quota/test_churn_equivalence.py`` plays both). Kept simple on purpose:
every call collects and sorts every candidate of the tree.

1. Collect candidates: same-queue ones per ``within_cluster_queue``; from other
   queues of the cohort tree per ``reclaim_within_cohort``, walking up from the
   queue and only into subtrees that use more than their quota.
2. Sort each group: lower priority, then most recently admitted, then name.
3. Try one or two attempts (borrowing allowed or not): remove candidates in
   order, skipping those whose queue is back within nominal, until the
   workload fits; then give back the ones not needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

from quota.cache import AdmittedWorkload, ClusterQueueNode, ClusterState, CohortNode
from quota.model import BorrowWithinCohortPolicy, ReclaimWithinCohort, WithinClusterQueue
from quota.preemption.common import (
    PreemptionReason,
    PreemptionRequest,
    Target,
    fill_back,
    is_within_nominal,
    restore,
    satisfies_policy,
    simulate_removal,
    workload_fits,
)
from quota.resources import FlavorResource
from quota.tree import ResourceNode, local_available

__all__ = ["classical_targets", "victim_order"]


class _Variant(IntEnum):
    NEVER = 0
    WITHIN_CQ = 1
    HIERARCHICAL_RECLAIM = 2
    RECLAIM_WITHOUT_BORROWING = 3
    RECLAIM_WHILE_BORROWING = 4


_REASON = {
    _Variant.WITHIN_CQ: PreemptionReason.IN_CLUSTER_QUEUE,
    _Variant.HIERARCHICAL_RECLAIM: PreemptionReason.IN_COHORT_RECLAMATION,
    _Variant.RECLAIM_WITHOUT_BORROWING: PreemptionReason.IN_COHORT_RECLAMATION,
    _Variant.RECLAIM_WHILE_BORROWING: PreemptionReason.IN_COHORT_RECLAIM_WHILE_BORROWING,
}


@dataclass(frozen=True, slots=True)
class _Candidate:
    record: AdmittedWorkload
    lca: ResourceNode | None  # lowest common ancestor with the preemptor's queue
    variant: _Variant


def victim_order(record: AdmittedWorkload) -> tuple[int, float, str]:
    """Lower priority first, then the most recently admitted, then by name."""
    return (record.priority, -record.admitted_at, record.name)


def classical_targets(state: ClusterState, request: PreemptionRequest) -> list[Target]:
    """The fewest workloads to evict so that ``request`` fits, or ``[]``."""
    queue = request.queue
    same_queue = _same_queue_candidates(request)
    hierarchical, by_priority = _cohort_candidates(request)
    candidates = [
        *sorted(hierarchical, key=lambda c: victim_order(c.record)),
        *sorted(by_priority, key=lambda c: victim_order(c.record)),
        *sorted(same_queue, key=lambda c: victim_order(c.record)),
    ]
    policy = queue.spec.preemption
    forbidden = policy.borrow_within_cohort is BorrowWithinCohortPolicy.NEVER
    attempts: tuple[bool, ...]
    if (not hierarchical and not by_priority) or (forbidden and not _under_nominal(request)):
        attempts = (True,)
    elif forbidden and not hierarchical:
        attempts = (False, True)
    else:
        attempts = (True, False)
    for allow_borrowing in attempts:
        targets: list[Target] = []
        for candidate in candidates:
            if not _is_valid(state, request, candidate, allow_borrowing):
                continue
            simulate_removal(state, candidate.record)
            targets.append(Target(candidate.record, _REASON[candidate.variant]))
            if workload_fits(request, allow_borrowing):
                targets = fill_back(state, request, targets, allow_borrowing)
                restore(state, (t.record for t in targets))
                return targets
        restore(state, (t.record for t in targets))
    return []


def _under_nominal(request: PreemptionRequest) -> bool:
    queue = request.queue
    return all(queue.usage.get(fr, 0) < queue.quota(fr).nominal for fr in request.needs_preemption)


def _variant(request: PreemptionRequest, record: AdmittedWorkload, advantage: bool) -> _Variant:
    if not _uses_any(record, request.needs_preemption):
        return _Variant.NEVER
    queue = request.queue
    policy = queue.spec.preemption
    same_queue = record.admission.cluster_queue == queue.name
    rule = policy.within_cluster_queue if same_queue else policy.reclaim_within_cohort
    if not satisfies_policy(request.workload, record.workload, rule):
        return _Variant.NEVER
    if same_queue:
        return _Variant.WITHIN_CQ
    if advantage:
        return _Variant.HIERARCHICAL_RECLAIM
    if policy.borrow_within_cohort is BorrowWithinCohortPolicy.NEVER:
        return _Variant.RECLAIM_WITHOUT_BORROWING
    threshold = policy.max_priority_threshold
    if record.priority >= request.workload.priority or (
        threshold is not None and record.priority > threshold
    ):
        return _Variant.RECLAIM_WITHOUT_BORROWING
    return _Variant.RECLAIM_WHILE_BORROWING


def _uses_any(record: AdmittedWorkload, frs: frozenset[FlavorResource]) -> bool:
    return any(fr in frs for fr in record.usage)


def _from_queue(
    request: PreemptionRequest, queue: ClusterQueueNode, lca: ResourceNode | None, advantage: bool
) -> Iterator[_Candidate]:
    for record in queue.admitted.values():
        variant = _variant(request, record, advantage)
        if variant is not _Variant.NEVER:
            yield _Candidate(record, lca, variant)


def _same_queue_candidates(request: PreemptionRequest) -> list[_Candidate]:
    if request.queue.spec.preemption.within_cluster_queue is WithinClusterQueue.NEVER:
        return []
    return list(_from_queue(request, request.queue, None, False))


def _cohort_candidates(request: PreemptionRequest) -> tuple[list[_Candidate], list[_Candidate]]:
    """Candidates from other queues, split by whether the preemptor has the
    hierarchical advantage (its request fits the quota of the subtree they share)."""
    queue = request.queue
    hierarchical: list[_Candidate] = []
    by_priority: list[_Candidate] = []
    if queue.parent is None or (
        queue.spec.preemption.reclaim_within_cohort is ReclaimWithinCohort.NEVER
    ):
        return hierarchical, by_priority
    advantage, remaining = _fits_in_quota(queue, dict(request.usage))
    previous: ResourceNode | None = None
    node: ResourceNode | None = queue.parent
    while node is not None:
        assert isinstance(node, CohortNode)
        into = hierarchical if advantage else by_priority
        _collect_subtree(request, node, node, previous, advantage, into)
        fits, remaining = _fits_in_quota(node, remaining)
        advantage = advantage or fits
        previous, node = node, node.parent
    return hierarchical, by_priority


def _collect_subtree(
    request: PreemptionRequest,
    cohort: CohortNode,
    lca: CohortNode,
    skip: ResourceNode | None,
    advantage: bool,
    into: list[_Candidate],
) -> None:
    frs = request.needs_preemption
    for child in cohort.child_cohorts:
        if child is skip or is_within_nominal(child, frs):
            continue
        _collect_subtree(request, child, lca, skip, advantage, into)
    for queue in cohort.child_queues:
        if queue is request.queue or is_within_nominal(queue, frs):
            continue
        into.extend(_from_queue(request, queue, lca, advantage))


def _fits_in_quota(
    node: ResourceNode, requests: dict[FlavorResource, int]
) -> tuple[bool, dict[FlavorResource, int]]:
    fits = True
    remaining = {}
    for fr, amount in requests.items():
        if node.usage.get(fr, 0) + amount > node.subtree_quota.get(fr, 0):
            fits = False
        remaining[fr] = max(0, amount - local_available(node, fr))
    return fits, remaining


def _is_valid(
    state: ClusterState, request: PreemptionRequest, candidate: _Candidate, allow_borrowing: bool
) -> bool:
    """Checked when reached, against usage with earlier targets already removed."""
    queue_name = candidate.record.admission.cluster_queue
    if queue_name == request.queue.name:
        return True
    if allow_borrowing and candidate.variant is _Variant.RECLAIM_WITHOUT_BORROWING:
        return False
    frs = request.needs_preemption
    node: ResourceNode | None = state.queues[queue_name]
    while node is not None and node is not candidate.lca:
        if is_within_nominal(node, frs):
            return False
        node = node.parent
    return True
