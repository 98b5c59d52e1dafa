"""Kueue's fair-sharing preemption, the straightforward way: the reference for
:mod:`quota.preemption.fair`, which must choose exactly the same targets
(``tests/quota/test_churn_equivalence.py`` plays both). Kept as it was written:
every call collects and sorts every candidate, and every share is computed by
changing the tree and reading it back.

As in Kueue's ``pkg/scheduler/preemption/fairsharing``:

1. Candidates: the queue's own workloads per ``within_cluster_queue``, and those
   of every queue of the tree that is over its nominal quota on a contested
   flavor-resource, per ``reclaim_within_cohort``.
2. With the preemptor's usage added, walk down from the root to the subtree
   with the largest dominant resource share, again after every eviction.
3. Pass 1: a candidate goes if the preemptor's share (at the children of the
   lowest common ancestor) stays at or below the target's share after the
   eviction; own-queue candidates, and everything when the preemptor stays
   within nominal, go without a check. Pass 2: one more per queue if the
   preemptor's share is below the target's current share.
4. Stop as soon as the workload fits; give back what it does not need.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator

from quota.cache import AdmittedWorkload, ClusterQueueNode, ClusterState, CohortNode
from quota.fair_sharing import DRS, NEGATIVE_DRS, compare_drs, dominant_resource_share
from quota.model import ReclaimWithinCohort, WithinClusterQueue
from quota.preemption.common import (
    PreemptionReason,
    PreemptionRequest,
    Target,
    fill_back,
    restore,
    satisfies_policy,
    simulate_removal,
    workload_fits,
)
from quota.tree import ResourceNode, path_to_root

__all__ = ["fair_targets"]

Strategy = Callable[[DRS, DRS, DRS], bool]


def _less_or_equal_to_final_share(preemptor: DRS, target_old: DRS, target_new: DRS) -> bool:
    return compare_drs(preemptor, target_new) <= 0


def _less_than_initial_share(preemptor: DRS, target_old: DRS, target_new: DRS) -> bool:
    return compare_drs(preemptor, target_old) < 0


def fair_targets(state: ClusterState, request: PreemptionRequest) -> list[Target]:
    candidates = _candidates(state, request)
    if not candidates:
        return []
    queue = request.queue
    candidates.sort(key=lambda r: _order(r, queue.name))
    targets: list[Target] = []
    fits = False

    def on_target(target: Target) -> bool:
        nonlocal fits
        targets.append(target)
        state.refund(queue, dict(request.usage))
        fits = workload_fits(request, True)
        state.charge(queue, dict(request.usage))
        return fits

    state.charge(queue, dict(request.usage))
    try:
        retry, stopped = _first_pass(state, request, candidates, on_target)
        if not stopped:
            _second_pass(state, request, retry, on_target)
    finally:
        state.refund(queue, dict(request.usage))
    if not fits:
        restore(state, (t.record for t in targets))
        return []
    targets = fill_back(state, request, targets, True)
    restore(state, (t.record for t in targets))
    return targets


def _order(record: AdmittedWorkload, preemptor_queue: str) -> tuple[bool, int, float, str]:
    """Other queues first, then lower priority, most recently admitted, name."""
    own = record.admission.cluster_queue == preemptor_queue
    return (own, record.priority, -record.admitted_at, record.name)


def _candidates(state: ClusterState, request: PreemptionRequest) -> list[AdmittedWorkload]:
    queue, needs = request.queue, request.needs_preemption
    policy = queue.spec.preemption
    found: list[AdmittedWorkload] = []

    def eligible(records: Iterable[AdmittedWorkload], rule: str) -> Iterator[AdmittedWorkload]:
        for record in records:
            if any(fr in needs for fr in record.usage) and satisfies_policy(
                request.workload, record.workload, rule
            ):
                yield record

    if policy.within_cluster_queue is not WithinClusterQueue.NEVER:
        found.extend(eligible(queue.admitted.values(), policy.within_cluster_queue))
    if queue.parent is not None and policy.reclaim_within_cohort is not ReclaimWithinCohort.NEVER:
        for other in state.queues_under(state.root_of(queue)):
            if other is queue or not any(other.is_borrowing(fr) for fr in needs):
                continue
            found.extend(eligible(other.admitted.values(), policy.reclaim_within_cohort))
    return found


def _first_pass(
    state: ClusterState,
    request: PreemptionRequest,
    candidates: list[AdmittedWorkload],
    on_target: Callable[[Target], bool],
) -> tuple[list[AdmittedWorkload], bool]:
    queue = request.queue
    ordering = _TargetOrdering(state, queue, candidates)
    retry: list[AdmittedWorkload] = []
    within_nominal = not any(queue.is_borrowing(fr) for fr in request.needs_preemption)
    for target_queue in ordering.iter_targets():
        if target_queue is queue or within_nominal:
            record = ordering.pop(target_queue)
            simulate_removal(state, record)
            reason = (
                PreemptionReason.IN_CLUSTER_QUEUE
                if target_queue is queue
                else PreemptionReason.IN_COHORT_RECLAMATION
            )
            if on_target(Target(record, reason)):
                return retry, True
            continue
        preemptor_share, target_old = _shares(queue, target_queue)
        if preemptor_share.zero_weight_borrows and not target_old.zero_weight_borrows:
            retry.extend(ordering.pop_all(target_queue))
            continue
        while ordering.has(target_queue):
            record = ordering.pop(target_queue)
            target_new = _share_after_removal(state, queue, target_queue, record)
            if _less_or_equal_to_final_share(preemptor_share, target_old, target_new):
                simulate_removal(state, record)
                if on_target(Target(record, PreemptionReason.IN_COHORT_FAIR_SHARING)):
                    return retry, True
                break  # shares changed: choose the target subtree again from the root
            retry.append(record)
    return retry, False


def _second_pass(
    state: ClusterState,
    request: PreemptionRequest,
    retry: list[AdmittedWorkload],
    on_target: Callable[[Target], bool],
) -> bool:
    queue = request.queue
    ordering = _TargetOrdering(state, queue, retry)
    for target_queue in ordering.iter_targets():
        preemptor_share, target_old = _shares(queue, target_queue)
        record = ordering.pop(target_queue)
        if _less_than_initial_share(preemptor_share, target_old, target_old):
            simulate_removal(state, record)
            if on_target(Target(record, PreemptionReason.IN_COHORT_FAIR_SHARING)):
                return True
        ordering.pop_all(target_queue)  # at most one candidate per queue in this pass
    return False


def _almost_lcas(
    preemptor: ClusterQueueNode, target: ClusterQueueNode
) -> tuple[ResourceNode, ResourceNode]:
    """The children of the lowest common ancestor on each queue's path."""
    preemptor_path = path_to_root(preemptor)
    index = {id(node): i for i, node in enumerate(preemptor_path)}
    target_path = path_to_root(target)
    for i in range(1, len(target_path)):
        j = index.get(id(target_path[i]))
        if j is not None:
            return preemptor_path[j - 1], target_path[i - 1]
    raise AssertionError("queues of one preemption share no cohort")


def _shares(preemptor: ClusterQueueNode, target: ClusterQueueNode) -> tuple[DRS, DRS]:
    mine, theirs = _almost_lcas(preemptor, target)
    return dominant_resource_share(mine), dominant_resource_share(theirs)


def _share_after_removal(
    state: ClusterState,
    preemptor: ClusterQueueNode,
    target: ClusterQueueNode,
    record: AdmittedWorkload,
) -> DRS:
    state.refund(target, record.usage)
    try:
        return dominant_resource_share(_almost_lcas(preemptor, target)[1])
    finally:
        state.charge(target, record.usage)


class _TargetOrdering:
    """Yields the queue to take the next victim from: the most unfair subtree first."""

    def __init__(
        self, state: ClusterState, preemptor: ClusterQueueNode, candidates: list[AdmittedWorkload]
    ) -> None:
        self.state = state
        self.preemptor = preemptor
        self.targets: dict[str, deque[AdmittedWorkload]] = {}
        for record in candidates:
            self.targets.setdefault(record.admission.cluster_queue, deque()).append(record)
        self.ancestors = {id(node) for node in path_to_root(preemptor)[1:]}
        self.pruned_queues: set[str] = set()
        self.pruned_cohorts: set[str] = set()

    def has(self, queue: ClusterQueueNode) -> bool:
        return bool(self.targets.get(queue.name))

    def pop(self, queue: ClusterQueueNode) -> AdmittedWorkload:
        return self.targets[queue.name].popleft()

    def pop_all(self, queue: ClusterQueueNode) -> list[AdmittedWorkload]:
        records = list(self.targets.get(queue.name, ()))
        self.targets[queue.name] = deque()
        return records

    def iter_targets(self) -> Iterator[ClusterQueueNode]:
        """The caller pops at least one workload of each yielded queue (or drops it)."""
        if self.preemptor.parent is None:
            while self.has(self.preemptor):
                yield self.preemptor
            return
        root = self.state.root_of(self.preemptor)
        assert isinstance(root, CohortNode)
        while root.name not in self.pruned_cohorts:
            target = self._next(root)
            if target is not None:
                yield target

    def _next(self, cohort: CohortNode) -> ClusterQueueNode | None:
        best_queue, best_queue_share = None, NEGATIVE_DRS
        for queue in sorted(cohort.child_queues, key=lambda q: q.name):
            if queue.name in self.pruned_queues:
                continue
            share = dominant_resource_share(queue)
            if (not share.borrowing and queue is not self.preemptor) or not self.has(queue):
                self.pruned_queues.add(queue.name)
                continue
            versus = compare_drs(share, best_queue_share)
            if versus > 0 or (
                versus == 0
                and best_queue is not None
                and self._first_sorts_first(queue, best_queue)
            ):
                best_queue, best_queue_share = queue, share
        best_cohort, best_cohort_share = None, NEGATIVE_DRS
        for child in sorted(cohort.child_cohorts, key=lambda c: c.name):
            if child.name in self.pruned_cohorts:
                continue
            share = dominant_resource_share(child)
            if not share.borrowing and id(child) not in self.ancestors:
                self.pruned_cohorts.add(child.name)
            elif compare_drs(share, best_cohort_share) >= 0:
                best_cohort, best_cohort_share = child, share
        if best_cohort is None and best_queue is None:
            self.pruned_cohorts.add(cohort.name)
            return None
        if best_cohort is not None and compare_drs(best_cohort_share, best_queue_share) >= 0:
            return self._next(best_cohort)
        return best_queue

    def _first_sorts_first(self, queue: ClusterQueueNode, other: ClusterQueueNode) -> bool:
        name = self.preemptor.name
        return _order(self.targets[queue.name][0], name) < _order(self.targets[other.name][0], name)
