"""Kueue's fair-sharing preemption (``pkg/scheduler/preemption/fairsharing``).

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

The targets are exactly those of :mod:`quota.preemption.fair_reference`
(``tests/quota/test_churn_equivalence.py`` plays both); what differs is the cost.
A :class:`FairIndex`, kept by the preemptor, holds what does not change from one
search to the next: each queue's workloads in victim order (until its admitted
workloads change), and per node what its share is computed from besides its
usage (its flavor-resources and their quotas, what its parent could ever lend),
so a share is a few integer operations on the node's usage and a comparison of
two shares is one of two tuples (:data:`Key`). A share after a candidate's
eviction is computed from what the eviction would take off the node (the
arithmetic of :func:`quota.tree.remove_usage`, without changing the tree), once
per distinct usage in each visit of a queue. A node's current share is kept on its
:class:`_NodeShare` until usage changes (an eviction simulated, or the search's
charge of the preemptor put back), and an ordering lists each cohort's children once.

And a search in which nothing can ever be evicted ends at once (most searches of
a busy cohort are such): when the preemptor borrows and has no candidate of its
own, a candidate goes only if the preemptor's share is at most the current share
of the candidate's side, since an eviction never raises the share of the side it
leaves; if that holds on no side before the first eviction, there is none. That
is decided before any queue's candidates are put in victim order.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterator, Mapping

from quota.budgets import is_budget
from quota.cache import AdmittedWorkload, ClusterQueueNode, ClusterState, CohortNode
from quota.model import ReclaimWithinCohort, WithinClusterQueue, Workload
from quota.preemption.common import (
    PreemptionReason,
    PreemptionRequest,
    Rankings,
    Target,
    fill_back,
    restore,
    satisfies_policy,
    simulate_removal,
    workload_fits,
)
from quota.resources import FlavorResource
from quota.tree import ResourceNode, path_to_root, potential_available

__all__ = ["FairIndex", "Key", "fair_targets"]

# A dominant resource share reduced to what compare_drs reads: (borrows with a zero
# weight, its ratio if so, else its weighted share). compare_drs(a, b) is the
# comparison of the two keys: a zero-weight borrower is above every other share, and
# two of them compare by ratio, the rest by weighted share.
Key = tuple[bool, float]
_ZERO: Key = (False, 0.0)
_NEGATIVE: Key = (False, -1.0)  # NEGATIVE_DRS


# The comparisons of two keys written out: compiled, they read two fields where the
# tuple operators box both keys and go through the generic comparison.
def _above(a: Key, b: Key) -> bool:
    """``a > b``."""
    return a[0] > b[0] or (a[0] == b[0] and a[1] > b[1])


def _same(a: Key, b: Key) -> bool:
    return a[0] == b[0] and a[1] == b[1]


class _NodeShare:
    """What a node's dominant resource share is computed from, besides its usage:
    fixed once the tree's quotas are set (``subtree`` tells if they were set again)."""

    __slots__ = (
        "at",
        "borrows",
        "epoch",
        "frs",
        "items",
        "lendable",
        "node",
        "root",
        "single",
        "subtree",
        "weight",
    )

    def __init__(self, node: ResourceNode) -> None:
        self.node = node
        # The share as usage stood in ``epoch`` (see current).
        self.epoch = -1
        self.at: Key = _ZERO
        self.borrows = False
        self.subtree = node.subtree_quota
        self.weight = node.weight
        parent = node.parent
        self.root = parent is None
        # Budgets are not shares of the pool.
        self.items = [
            (fr, fr.resource, quota)
            for fr, quota in node.subtree_quota.items()
            if not is_budget(fr.resource)
        ]
        self.frs = tuple(fr for fr, _, _ in self.items)
        self.lendable: dict[str, int] = {}
        if parent is not None:
            top = parent
            while top.parent is not None:
                top = top.parent
            resources = {resource for _, resource, _ in self.items}
            for fr in top.subtree_quota:
                if fr.resource in resources:
                    self.lendable[fr.resource] = self.lendable.get(
                        fr.resource, 0
                    ) + potential_available(parent, fr)
        # The usual tree shares one flavor-resource: its key is then a few operations.
        self.single: tuple[FlavorResource, int, int] | None = None
        if len(self.items) == 1:
            fr, resource, quota = self.items[0]
            self.single = (fr, quota, self.lendable.get(resource, 0))

    def current(self, epoch: int) -> Key:
        """The node's share as its usage stands, computed once per ``epoch`` (a number
        from :meth:`FairIndex.next_epoch` that the caller drops when usage changes);
        ``borrows`` is set with it."""
        if self.epoch != epoch:
            self.at, self.borrows = self.key(self.node.usage)
            self.epoch = epoch
        return self.at

    def key(self, usage: Mapping[FlavorResource, int]) -> tuple[Key, bool]:
        """The share of a node with ``usage``, and whether it borrows
        (``dominant_resource_share``, in its operation order)."""
        if self.root:
            return _ZERO, False
        single = self.single
        if single is not None:
            over = usage.get(single[0], 0) - single[1]
            if over <= 0:
                return _ZERO, False
            return self._single_key(over, single[2]), True
        borrowed: dict[str, int] = {}
        for fr, resource, quota in self.items:
            over = usage.get(fr, 0) - quota
            if over > 0:
                borrowed[resource] = borrowed.get(resource, 0) + over
        if not borrowed:
            return _ZERO, False
        return self._key(borrowed), True

    def key_without(
        self, path: tuple[ResourceNode, ...], removed: Mapping[FlavorResource, int]
    ) -> Key:
        """The share of the node were ``removed`` refunded to ``path[0]``, a queue
        below it (``path`` runs from that queue up to the node's child)."""
        if self.root:
            return _ZERO
        usage = self.node.usage
        single = self.single
        if single is not None:
            fr = single[0]
            amount = removed.get(fr, 0)
            if amount:
                amount = _reaching(path, fr, amount)
            over = usage.get(fr, 0) - amount - single[1]
            if over <= 0:
                return _ZERO
            return self._single_key(over, single[2])
        borrowed: dict[str, int] = {}
        for fr, resource, quota in self.items:
            amount = removed.get(fr, 0)
            if amount:
                amount = _reaching(path, fr, amount)
            over = usage.get(fr, 0) - amount - quota
            if over > 0:
                borrowed[resource] = borrowed.get(resource, 0) + over
        if not borrowed:
            return _ZERO
        return self._key(borrowed)

    def _single_key(self, amount: int, total: int) -> Key:
        """:meth:`_key` of one borrowed resource."""
        ratio = max(0.0, float(amount) * 1000.0 / float(total)) if total > 0 else 0.0
        return self._weighted(ratio)

    def _key(self, borrowed: dict[str, int]) -> Key:
        ratio = 0.0
        lendable = self.lendable
        for resource, amount in borrowed.items():
            total = lendable.get(resource, 0)
            if total > 0:
                value = float(amount) * 1000.0 / float(total)
                if value > ratio:
                    ratio = value
        return self._weighted(ratio)

    def _weighted(self, ratio: float) -> Key:
        weight = self.weight
        if weight == 0:
            return (True, ratio)
        return (False, 0.0 if ratio == 0 else ratio / weight)


def _reaching(path: tuple[ResourceNode, ...], fr: FlavorResource, amount: int) -> int:
    """What :func:`quota.tree.remove_usage` of ``amount`` at ``path[0]`` takes off the
    node above ``path[-1]``: each node passes up at most what it had stored there."""
    for node in path:
        stored = node.usage.get(fr, 0) - node.guaranteed.get(fr, 0)
        if stored <= 0:
            return 0
        if amount > stored:
            amount = stored
    return amount


class _Pair:
    """A preemptor's queue and a target queue: the children of their lowest common
    ancestor on each side, and the target's path up to its side's child."""

    __slots__ = ("mine", "path", "theirs")

    def __init__(
        self, mine: _NodeShare, theirs: _NodeShare, path: tuple[ResourceNode, ...]
    ) -> None:
        self.mine = mine
        self.theirs = theirs
        self.path = path

    def fresh(self) -> bool:
        return (
            self.mine.subtree is self.mine.node.subtree_quota
            and self.theirs.subtree is self.theirs.node.subtree_quota
        )


# (workloads using a contested flavor-resource in victim order, their priorities), kept
# in :class:`Rankings` while they stand
_Ranked = tuple[list[AdmittedWorkload], list[int]]


class FairIndex:
    """What fair-sharing searches read that outlives one search. Everything kept is
    either derived from quotas (fixed once the tree is built) or checked against the
    queue's ``admitted_version`` (simulations, :meth:`ClusterState.freed`, change usage
    alone, and no search runs inside one); usage is always read live,
    so nothing here needs refreshing between cycles, only sweeping (:meth:`sweep`)."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._shares: dict[int, _NodeShare] = {}
        self._pairs: dict[str, dict[str, _Pair]] = {}  # by preemptor's queue, target queue
        self._ranked: Rankings[_Ranked] = Rankings()
        self._members: dict[int, list[ClusterQueueNode]] = {}
        self._nominals: dict[tuple[int, FlavorResource], list[tuple[ClusterQueueNode, int]]] = {}
        self._epochs = 0

    def next_epoch(self) -> int:
        """A number no share cached so far was computed in (see :meth:`_NodeShare.current`)."""
        self._epochs += 1
        return self._epochs

    def share(self, node: ResourceNode) -> _NodeShare:
        found = self._shares.get(id(node))
        if found is None or found.node is not node or found.subtree is not node.subtree_quota:
            found = self._shares[id(node)] = _NodeShare(node)
        return found

    def key(self, node: ResourceNode) -> tuple[Key, bool]:
        return self.share(node).key(node.usage)

    def pair(self, preemptor: ClusterQueueNode, target: ClusterQueueNode) -> _Pair:
        pairs = self._pairs.get(preemptor.name)
        if pairs is None:
            pairs = self._pairs[preemptor.name] = {}
        found = pairs.get(target.name)
        if found is None or not found.fresh():
            mine, theirs = _almost_lcas(preemptor, target)
            path = path_to_root(target)
            below = tuple(path[: path.index(theirs)])
            found = pairs[target.name] = _Pair(self.share(mine), self.share(theirs), below)
        return found

    def members(self, root: ResourceNode) -> list[ClusterQueueNode]:
        """``state.queues_under(root)``, in its order (the tree's shape is fixed)."""
        found = self._members.get(id(root))
        if found is None:
            found = self._members[id(root)] = list(self.state.queues_under(root))
        return found

    def nominals(
        self, root: ResourceNode, fr: FlavorResource
    ) -> list[tuple[ClusterQueueNode, int]]:
        """Each queue of :meth:`members` with its nominal quota of ``fr``."""
        found = self._nominals.get((id(root), fr))
        if found is None:
            found = self._nominals[(id(root), fr)] = [
                (queue, queue.quota(fr).nominal) for queue in self.members(root)
            ]
        return found

    def has_eligible(
        self,
        queue: ClusterQueueNode,
        needs: frozenset[FlavorResource],
        preemptor: Workload,
        rule: str,
    ) -> bool:
        """Whether ``rule`` lets ``preemptor`` evict any of the queue's workloads using
        ``needs`` (for ``Any``, without putting them in victim order)."""
        if rule == "Any":
            return any(not needs.isdisjoint(r.usage) for r in queue.admitted.values())
        records, priorities = self.ranked(queue, needs)
        return bool(_eligible(preemptor, records, priorities, rule))

    def ranked(self, queue: ClusterQueueNode, needs: frozenset[FlavorResource]) -> _Ranked:
        entry = self._ranked.get(queue, needs)
        if entry is None:
            if len(needs) == 1:  # the usual case: a key lookup, not a set operation
                (fr,) = needs
                records = [r for _, r in queue.victims if fr in r.usage]
            else:
                records = [r for _, r in queue.victims if not needs.isdisjoint(r.usage)]
            entry = self._ranked.put(queue, needs, (records, [r.priority for r in records]))
        return entry

    def sweep(self) -> None:
        """Drop what went stale (see :class:`Rankings`); nothing else here does."""
        self._ranked.sweep(self.state.queues)


def fair_targets(
    state: ClusterState, request: PreemptionRequest, index: FairIndex | None = None
) -> list[Target]:
    """The workloads to evict so that ``request`` fits, or ``[]``: exactly those of
    :func:`quota.preemption.fair_reference.fair_targets`. ``index`` may be kept from
    one search to the next (a fresh one is made otherwise)."""
    if index is None:
        index = FairIndex(state)
    queue = request.queue
    # Read before anything is charged, by both steps below.
    others = (
        _borrowing_others(state, index, queue, request.needs_preemption)
        if queue.parent is not None
        and queue.spec.preemption.reclaim_within_cohort is not ReclaimWithinCohort.NEVER
        else []
    )
    if _nothing_to_evict(state, index, request, others):
        return []
    candidates = _candidates(index, request, others)
    if not candidates:
        return []
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
        within_nominal = not any(queue.is_borrowing(fr) for fr in request.needs_preemption)
        retry, stopped = _first_pass(state, index, request, candidates, within_nominal, on_target)
        if not stopped:
            _second_pass(state, index, request, retry, on_target)
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


Candidates = dict[str, list[AdmittedWorkload]]


def _candidates(
    index: FairIndex, request: PreemptionRequest, others: list[ClusterQueueNode]
) -> Candidates:
    """Each queue's candidates in victim order (only queues that have some), of its
    own and of ``others`` (:func:`_borrowing_others`, where the policy reclaims). Only
    the order within a queue matters: the search groups them by queue, and compares
    queues by their first candidates."""
    queue, needs, workload = request.queue, request.needs_preemption, request.workload
    policy = queue.spec.preemption
    found: Candidates = {}

    def add(member: ClusterQueueNode, rule: str) -> None:
        records, priorities = index.ranked(member, needs)
        eligible = _eligible(workload, records, priorities, rule)
        if eligible:
            found[member.name] = eligible

    if policy.within_cluster_queue is not WithinClusterQueue.NEVER:
        add(queue, policy.within_cluster_queue)
    for other in others:
        add(other, policy.reclaim_within_cohort)
    return found


def _borrowing_others(
    state: ClusterState,
    index: FairIndex,
    queue: ClusterQueueNode,
    needs: frozenset[FlavorResource],
) -> list[ClusterQueueNode]:
    """The other queues of the tree over nominal in any of ``needs``, in tree order."""
    root = state.root_of(queue)
    if len(needs) == 1:  # the usual case: one pass over (queue, nominal quota) pairs
        (fr,) = needs
        return [
            other
            for other, nominal in index.nominals(root, fr)
            if other.usage.get(fr, 0) > nominal and other is not queue
        ]
    return [
        other
        for other in index.members(root)
        if other is not queue and any(other.is_borrowing(fr) for fr in needs)
    ]


def _eligible(
    preemptor: Workload, records: list[AdmittedWorkload], priorities: list[int], rule: str
) -> list[AdmittedWorkload]:
    """``records`` (by priority) that ``rule`` lets ``preemptor`` evict."""
    if rule == "Any":
        return records
    lower = bisect.bisect_left(priorities, preemptor.priority)
    if rule == "LowerPriority":
        return records[:lower]
    if rule == "LowerOrNewerEqualPriority":
        equal = bisect.bisect_right(priorities, preemptor.priority, lower)
        newer = [r for r in records[lower:equal] if preemptor.order_time < r.workload.order_time]
        return records[:lower] + newer
    return [r for r in records if satisfies_policy(preemptor, r.workload, rule)]


def _nothing_to_evict(
    state: ClusterState,
    index: FairIndex,
    request: PreemptionRequest,
    others: list[ClusterQueueNode],
) -> bool:
    """Would the search surely evict nothing? Decided before the candidates are
    listed (which sorts a queue's workloads whenever they changed); False when
    unsure, and the search decides.

    With no candidate, nothing goes. With candidates of its own, or staying within
    nominal, the preemptor takes some without a check. Otherwise it borrows, and only
    the fairness checks let a candidate go; both need the preemptor's share at or
    below the current share of the candidate's side (after an eviction, that side's
    share is at most its current one, amounts being non-negative, which the engine
    makes sure of, and weights too; a side of negative weight counts as passing).
    Before the first eviction shares are as now; if no side with candidates passes
    now, none ever does, so a queue's candidates are only counted, never ordered.
    ``others``: the queues over nominal that the policy reclaims from
    (:func:`_borrowing_others`)."""
    queue, needs, workload = request.queue, request.needs_preemption, request.workload
    if queue.parent is None:
        return False
    policy = queue.spec.preemption
    if policy.within_cluster_queue is not WithinClusterQueue.NEVER and index.has_eligible(
        queue, needs, workload, policy.within_cluster_queue
    ):
        return False
    rule = policy.reclaim_within_cohort
    if not others:  # none over nominal, or the policy never reclaims
        return True
    state.charge(queue, dict(request.usage))
    try:
        if not any(queue.is_borrowing(fr) for fr in needs):
            return False
        epoch = index.next_epoch()  # in a flat cohort, one side for every queue
        for other in others:
            pair = index.pair(queue, other)
            passes = (
                pair.mine.weight < 0
                or pair.theirs.weight < 0
                or not _above(pair.mine.current(epoch), pair.theirs.current(epoch))
            )
            if passes and index.has_eligible(other, needs, workload, rule):
                return False
        return True
    finally:
        state.refund(queue, dict(request.usage))


def _first_pass(
    state: ClusterState,
    index: FairIndex,
    request: PreemptionRequest,
    candidates: Candidates,
    within_nominal: bool,
    on_target: Callable[[Target], bool],
) -> tuple[Candidates, bool]:
    """Returns the candidates left for the second pass (by queue, in order: the
    second pass groups them by queue) and whether the search stopped."""
    queue = request.queue
    ordering = _TargetOrdering(state, index, queue, candidates)
    retry: Candidates = {}
    for target in ordering.iter_targets():
        target_queue, pending = target.queue, target.pending
        if target_queue is queue or within_nominal:
            record = pending.popleft()
            simulate_removal(state, record)
            ordering.changed()
            reason = (
                PreemptionReason.IN_CLUSTER_QUEUE
                if target_queue is queue
                else PreemptionReason.IN_COHORT_RECLAMATION
            )
            if on_target(Target(record, reason)):
                return retry, True
            continue
        pair = ordering.pair(target)
        preemptor_share, target_old = ordering.key(pair.mine), ordering.key(pair.theirs)
        if preemptor_share[0] and not target_old[0]:  # only the preemptor borrows at weight 0
            retry.setdefault(target_queue.name, []).extend(pending)
            pending.clear()
            continue
        # Nothing changes while this queue's candidates are tried: the test depends
        # only on what a candidate holds of the flavor-resources its side's share reads.
        theirs, path, frs = pair.theirs, pair.path, pair.theirs.frs
        single = frs[0] if len(frs) == 1 else None
        passes: dict[object, bool] = {}
        left = retry.setdefault(target_queue.name, [])
        taken = None
        while pending:
            record = pending.popleft()
            usage = record.usage
            held: object = (
                usage.get(single, 0)
                if single is not None
                else tuple([usage.get(fr, 0) for fr in frs])
            )
            passed = passes.get(held)
            if passed is None:
                # compare_drs(preemptor, target_new) <= 0
                passed = passes[held] = not _above(preemptor_share, theirs.key_without(path, usage))
            if passed:
                taken = record
                break
            left.append(record)
        if taken is not None:
            simulate_removal(state, taken)
            ordering.changed()
            if on_target(Target(taken, PreemptionReason.IN_COHORT_FAIR_SHARING)):
                return retry, True
            # shares changed: choose the target subtree again from the root
    return retry, False


def _second_pass(
    state: ClusterState,
    index: FairIndex,
    request: PreemptionRequest,
    retry: Candidates,
    on_target: Callable[[Target], bool],
) -> bool:
    queue = request.queue
    ordering = _TargetOrdering(state, index, queue, retry)
    for target in ordering.iter_targets():
        pair = ordering.pair(target)
        preemptor_share, target_old = ordering.key(pair.mine), ordering.key(pair.theirs)
        record = target.pending.popleft()
        if _above(target_old, preemptor_share):  # compare_drs(preemptor, target_old) < 0
            simulate_removal(state, record)
            ordering.changed()
            if on_target(Target(record, PreemptionReason.IN_COHORT_FAIR_SHARING)):
                return True
        target.pending.clear()  # at most one candidate per queue in this pass
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


class _Target:
    """A queue with candidates, as one ordering visits it: those left in victim
    order, its share's terms, and (once asked) its pair with the preemptor's queue."""

    __slots__ = ("pair", "pending", "queue", "share")

    def __init__(
        self, queue: ClusterQueueNode, share: _NodeShare, records: list[AdmittedWorkload]
    ) -> None:
        self.queue = queue
        self.share = share
        self.pending = deque(records)
        self.pair: _Pair | None = None


class _Level:
    """A cohort's children as one ordering visits them, by name: the child cohorts
    not pruned, and the child queues with candidates not pruned."""

    __slots__ = ("cohorts", "queues")

    def __init__(self, cohorts: list[tuple[CohortNode, _NodeShare]], queues: list[_Target]) -> None:
        self.cohorts = cohorts
        self.queues = queues


class _TargetOrdering:
    """Yields the queue to take the next victim from: the most unfair subtree first.

    Within one search a queue once pruned stays pruned, and a queue's candidates only
    ever shrink, so each cohort's children are listed once per ordering (``levels``)
    and pruned queues leave the list. Shares are cached on their :class:`_NodeShare`
    for the current epoch, which an eviction ends (:meth:`changed`)."""

    def __init__(
        self,
        state: ClusterState,
        index: FairIndex,
        preemptor: ClusterQueueNode,
        candidates: Candidates,
    ) -> None:
        self.state = state
        self.index = index
        self.preemptor = preemptor
        self.targets: dict[str, _Target] = {}
        for name, records in candidates.items():
            queue = state.queues[name]
            self.targets[name] = _Target(queue, index.share(queue), records)
        self.ancestors = {id(node) for node in path_to_root(preemptor)[1:]}
        self.pruned_cohorts: set[str] = set()
        self.levels: dict[int, _Level] = {}
        self.epoch = index.next_epoch()

    def key(self, share: _NodeShare) -> Key:
        """The node's share as usage stands (``share.borrows`` too)."""
        return share.current(self.epoch)

    def changed(self) -> None:
        """Usage changed (an eviction was simulated): shares are read afresh."""
        self.epoch = self.index.next_epoch()

    def pair(self, target: _Target) -> _Pair:
        pair = target.pair
        if pair is None:
            pair = target.pair = self.index.pair(self.preemptor, target.queue)
        return pair

    def iter_targets(self) -> Iterator[_Target]:
        """The caller pops at least one candidate of each yielded queue (or drops them)."""
        if self.preemptor.parent is None:
            own = self.targets.get(self.preemptor.name)
            while own is not None and own.pending:
                yield own
            return
        root = self.state.root_of(self.preemptor)
        assert isinstance(root, CohortNode)
        while root.name not in self.pruned_cohorts:
            target = self._next(root)
            if target is not None:
                yield target

    def _level(self, cohort: CohortNode) -> _Level:
        level = self.levels.get(id(cohort))
        if level is None:
            cohorts, queues = cohort.by_name()
            index, targets = self.index, self.targets
            level = self.levels[id(cohort)] = _Level(
                [(child, index.share(child)) for child in cohorts],
                [target for q in queues if (target := targets.get(q.name)) is not None],
            )
        return level

    def _next(self, cohort: CohortNode) -> _Target | None:
        level = self._level(cohort)
        best_queue: _Target | None = None
        best_queue_share = _NEGATIVE
        pruned = False
        for target in level.queues:
            share = self.key(target.share)
            if self._pruned(target):
                pruned = True
                continue
            if _above(share, best_queue_share) or (
                _same(share, best_queue_share)
                and best_queue is not None
                and self._first_sorts_first(target, best_queue)
            ):
                best_queue, best_queue_share = target, share
        if pruned:
            level.queues = [t for t in level.queues if not self._pruned(t)]
        best_cohort: CohortNode | None = None
        best_cohort_share = _NEGATIVE
        for child, child_share in level.cohorts:
            if child.name in self.pruned_cohorts:
                continue
            share = self.key(child_share)
            if not child_share.borrows and id(child) not in self.ancestors:
                self.pruned_cohorts.add(child.name)
            elif not _above(best_cohort_share, share):
                best_cohort, best_cohort_share = child, share
        if best_cohort is None and best_queue is None:
            self.pruned_cohorts.add(cohort.name)
            return None
        if best_cohort is not None and not _above(best_queue_share, best_cohort_share):
            return self._next(best_cohort)
        return best_queue

    def _pruned(self, target: _Target) -> bool:
        """Out of this ordering for good: no candidates left, or (not the preemptor's)
        not borrowing. Read after :meth:`key` of its share in this epoch."""
        return not target.pending or (
            not target.share.borrows and target.queue is not self.preemptor
        )

    def _first_sorts_first(self, target: _Target, other: _Target) -> bool:
        name = self.preemptor.name
        return _order(target.pending[0], name) < _order(other.pending[0], name)
