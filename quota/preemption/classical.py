"""Kueue's classical preemption (``pkg/scheduler/preemption/classical``).

1. Collect candidates: same-queue ones per ``within_cluster_queue``; from other
   queues of the cohort tree per ``reclaim_within_cohort``, walking up from the
   queue and only into subtrees that use more than their quota.
2. Sort each group: lower priority, then most recently admitted, then name.
3. Try one or two attempts (borrowing allowed or not): remove candidates in
   order, skipping those whose queue is back within nominal, until the
   workload fits; then give back the ones not needed.

The targets are exactly those of :mod:`quota.preemption.classical_reference`
(``tests/quota/test_churn_equivalence.py`` plays both); what differs is the cost.
A :class:`CandidateIndex` keeps, while nomination runs, each queue's workloads
per flavor-resource already in victim order and which nodes are over their
nominal quota. The candidates of the other queues are read level by level: what
a cohort reaches through children over nominal, merged in victim order as far as
any search has read it (:class:`_Sequence`), is shared by every search of the
stage, each skipping what is not its own (:class:`_Cursor`); so is how much they
could free. A search that fits after a few removals thus costs the candidates it
reads, not a step for every queue of the tree; and a level stops at the first
candidate its policy does not allow (they are sorted by priority).

Most searches find nothing. Before listing candidates, a search bounds what its
removals could ever free (:func:`_cannot_fit`): from the cohorts' totals when one
flavor-resource is contested (:meth:`CandidateIndex.reclaimable`, one step per
level of the tree), then per attempt from the groups' totals; an attempt that
could not fit even after taking all that is not run. A queue with a borrowing limit never
holds more than its quota plus that limit, and only its own candidates lower what
it holds (:func:`_beyond_ceiling`): a queue at its limit is refuted before the
tree is walked. And while that limit is what bounds the queue, no other queue's
removal changes a fit check (:func:`_others_cannot_help`): an attempt then asks its
own candidates alone, and walks the tree only to order two or more targets as Kueue
does.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator, Mapping
from enum import IntEnum
from itertools import chain

from quota.cache import (
    AdmittedWorkload,
    ClusterQueueNode,
    ClusterState,
    CohortNode,
    Victim,
    victim_order,
)
from quota.model import BorrowWithinCohortPolicy, ReclaimWithinCohort, WithinClusterQueue
from quota.preemption.common import (
    PreemptionReason,
    PreemptionRequest,
    Rankings,
    Target,
    fill_back,
    is_within_nominal,
    restore,
    satisfies_policy,
    simulate_removal,
    workload_fits,
)
from quota.resources import FlavorResource
from quota.tree import ResourceNode, available, queue_available

__all__ = ["CandidateIndex", "classical_targets", "victim_order"]


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

# Enum members read once: reading one off its class costs about as much as a small
# function call, and every search reads some.
_BORROW_NEVER = BorrowWithinCohortPolicy.NEVER
_RECLAIM_NEVER = ReclaimWithinCohort.NEVER
_WITHIN_NEVER = WithinClusterQueue.NEVER
_WITHIN_LOWER = WithinClusterQueue.LOWER_PRIORITY
_RECLAIM_LOWER = ReclaimWithinCohort.LOWER_PRIORITY

_Freed = dict[FlavorResource, int]  # what removals can free at most, per flavor-resource


class _Candidate:
    __slots__ = ("lca", "record", "variant")

    def __init__(self, record: AdmittedWorkload, lca: ResourceNode | None, variant: _Variant):
        self.record = record
        self.lca = lca  # lowest common ancestor with the preemptor's queue
        self.variant = variant


class CandidateIndex:
    """What collecting candidates reads. Each queue's workloads in victim order are
    kept until the queue's admitted workloads change; which nodes are over nominal
    is computed once per :meth:`refresh`, and so holds only while usage stands
    still (the nomination stage of a cycle: its preemption searches put back
    whatever they take out). Call :meth:`refresh` whenever usage may have changed.
    """

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._over: dict[FlavorResource, frozenset[int]] = {}
        self._over_children: dict[
            tuple[int, frozenset[FlavorResource]],
            tuple[list[CohortNode], list[ClusterQueueNode]],
        ] = {}
        # (queue, flavor-resources) -> what :meth:`candidates` keeps
        self._ranked: Rankings[_Entry] = Rankings()
        self._reclaimable: dict[tuple[int, FlavorResource], int] = {}
        self._reclaimable_above: dict[tuple[int, FlavorResource], int] = {}
        # (queue, flavor-resource) -> (the queue's admitted_version, its largest usage)
        self._largest_kept: dict[tuple[str, FlavorResource], tuple[int, int]] = {}
        self._sequences: dict[tuple[int, frozenset[FlavorResource]], _Sequence] = {}
        self._totals: dict[
            tuple[int, frozenset[FlavorResource], int | None], tuple[int, _Freed]
        ] = {}

    def refresh(self) -> None:
        self.release()
        self._ranked.sweep(self.state.queues)

    def release(self) -> None:
        """Drop what holds only while usage stands still."""
        self._over.clear()
        self._over_children.clear()
        self._reclaimable.clear()
        self._reclaimable_above.clear()
        self._sequences.clear()
        self._totals.clear()

    def over_nominal(self, node: ResourceNode, frs: frozenset[FlavorResource]) -> bool:
        """``not is_within_nominal(node, frs)``, as usage stood when first asked."""
        for fr in frs:
            over = self._over.get(fr)
            if over is None:
                over = self._over[fr] = self._nodes_over(fr)
            if id(node) in over:
                return True
        return False

    def children_over_nominal(
        self, cohort: CohortNode, frs: frozenset[FlavorResource]
    ) -> tuple[list[CohortNode], list[ClusterQueueNode]]:
        """The child cohorts and queues of ``cohort`` over nominal in any of ``frs``."""
        key = (id(cohort), frs)
        found = self._over_children.get(key)
        if found is None:
            found = self._over_children[key] = (
                [c for c in cohort.child_cohorts if self.over_nominal(c, frs)],
                [q for q in cohort.child_queues if self.over_nominal(q, frs)],
            )
        return found

    def _nodes_over(self, fr: FlavorResource) -> frozenset[int]:
        nodes: Iterator[ResourceNode] = chain(
            self.state.queues.values(), self.state.cohorts.values()
        )
        return frozenset(
            id(node) for node in nodes if node.usage.get(fr, 0) > node.subtree_quota.get(fr, 0)
        )

    def candidates(self, queue: ClusterQueueNode, frs: frozenset[FlavorResource]) -> _Entry:
        """The queue's workloads using any of ``frs``, in victim order."""
        entry = self._ranked.get(queue, frs)
        if entry is None:
            ranked = [item for item in queue.victims if any(fr in item[1].usage for fr in frs)]
            entry = self._ranked.put(queue, frs, _Entry(ranked, frs))
        return entry

    def sequence(self, cohort: CohortNode, frs: frozenset[FlavorResource]) -> _Sequence:
        """The candidates using any of ``frs`` of every queue ``cohort`` reaches through
        children over nominal in any of them, in victim order."""
        key = (id(cohort), frs)
        kept = self._sequences.get(key)
        if kept is None:
            sources = []
            for queue in self._reached(cohort, frs):
                ranked = self.candidates(queue, frs).ranked
                if ranked:
                    sources.append((queue, ranked, len(ranked)))
            kept = self._sequences[key] = _Sequence(sources)
        return kept

    def _reached(
        self, cohort: CohortNode, frs: frozenset[FlavorResource]
    ) -> Iterator[ClusterQueueNode]:
        cohorts, queues = self.children_over_nominal(cohort, frs)
        for child in cohorts:
            yield from self._reached(child, frs)
        yield from queues

    def totals(
        self, node: ResourceNode, frs: frozenset[FlavorResource], cut: int | None
    ) -> tuple[int, _Freed]:
        """Of the queues :meth:`sequence` reaches from ``node`` (a queue: itself), how
        many have a candidate below priority ``cut`` (``None``: any), and the most
        removals of those can free (:func:`_most_freed`)."""
        key = (id(node), frs, cut)
        kept = self._totals.get(key)
        if kept is not None:
            return kept
        if isinstance(node, ClusterQueueNode):
            entry = self.candidates(node, frs)
            stop = len(entry.ranked) if cut is None else bisect.bisect_left(entry.priorities, cut)
            kept = (1, _most_freed(entry, stop, node, frs)) if stop else (0, dict.fromkeys(frs, 0))
        else:
            assert isinstance(node, CohortNode)
            cohorts, queues = self.children_over_nominal(node, frs)
            count, freed = 0, dict.fromkeys(frs, 0)
            for child in chain(cohorts, queues):
                more, amounts = self.totals(child, frs, cut)
                count += more
                for fr, amount in amounts.items():
                    freed[fr] += amount
            kept = (count, freed)
        self._totals[key] = kept
        return kept

    def reclaimable(self, node: ResourceNode, fr: FlavorResource) -> int:
        """The most removals can free of ``fr`` in the queues reached from ``node``
        through children over nominal in ``fr`` (as :meth:`sequence` reaches
        them), each queue's all its usage but no more than its excess plus its
        largest workload (see :func:`_within_excess`). A queue: its own."""
        key = (id(node), fr)
        kept = self._reclaimable.get(key)
        if kept is not None:
            return kept
        if isinstance(node, ClusterQueueNode):
            kept = _within_excess(node, fr, node.usage.get(fr, 0), self._largest(node, fr))
        else:
            assert isinstance(node, CohortNode)
            cohorts, queues = self.children_over_nominal(node, frozenset((fr,)))
            kept = sum(self.reclaimable(child, fr) for child in chain(cohorts, queues))
        self._reclaimable[key] = kept
        return kept

    def reclaimable_above(self, node: ResourceNode, fr: FlavorResource) -> int:
        """:meth:`reclaimable` of the node's parent, less what of it is reached
        through ``node`` (visited at a lower level, or the preemptor's queue)."""
        key = (id(node), fr)
        kept = self._reclaimable_above.get(key)
        if kept is None:
            assert node.parent is not None
            kept = self.reclaimable(node.parent, fr)
            if self.over_nominal(node, frozenset((fr,))):
                kept -= self.reclaimable(node, fr)
            self._reclaimable_above[key] = kept
        return kept

    def _largest(self, queue: ClusterQueueNode, fr: FlavorResource) -> int:
        """The most any one of the queue's workloads uses of ``fr``."""
        key = (queue.name, fr)
        kept = self._largest_kept.get(key)
        if kept is None or kept[0] != queue.admitted_version:
            most = max((r.usage.get(fr, 0) for r in queue.admitted.values()), default=0)
            kept = self._largest_kept[key] = (queue.admitted_version, most)
        return kept[1]


class _Entry:
    """A queue's workloads using any of some flavor-resources, in victim order (kept in
    :class:`Rankings` while they stand); with running totals and maxima of their usage,
    for :func:`_most_freed`."""

    __slots__ = ("largest", "priorities", "ranked", "sums")

    def __init__(self, ranked: list[Victim], frs: frozenset[FlavorResource]):
        self.ranked = ranked
        self.priorities = [k[0] for k, _ in ranked]
        self.sums: dict[FlavorResource, list[int]] = {}
        self.largest: dict[FlavorResource, list[int]] = {}
        for fr in frs:
            sums, largest = [0], [0]
            for _, record in ranked:
                amount = record.usage.get(fr, 0)
                sums.append(sums[-1] + amount)
                largest.append(max(largest[-1], amount))
            self.sums[fr], self.largest[fr] = sums, largest


class _Own:
    """The preemptor's queue's own candidates that its policy allows: the first
    ``stop`` of ``entry.ranked``."""

    __slots__ = ("entry", "stop")

    def __init__(self, entry: _Entry, stop: int) -> None:
        self.entry = entry
        self.stop = stop


# An item of a :class:`_Sequence`: a candidate's victim key, its record and its queue.
_Item = tuple[tuple[int, float, str], AdmittedWorkload, ClusterQueueNode]


class _Sequence:
    """Candidates of some queues merged in victim order, as far as they have been read.
    A level's (every queue a cohort reaches through children over nominal) is shared by
    all the searches of a nomination stage (:meth:`CandidateIndex.sequence`): a search
    reads it through a :class:`_Cursor`, which skips what is not its own, instead of
    merging every one of those queues' candidates again."""

    __slots__ = ("_heap", "_sources", "items")

    def __init__(self, sources: list[tuple[ClusterQueueNode, list[Victim], int]]) -> None:
        self._sources = sources  # each queue, its candidates and how many of them count
        self._heap = [(*ranked[0][0], i, 0) for i, (_, ranked, stop) in enumerate(sources) if stop]
        heapq.heapify(self._heap)
        self.items: list[_Item] = []

    def at(self, n: int) -> _Item | None:
        """The ``n``-th candidate in victim order, or ``None`` past the last."""
        items, heap = self.items, self._heap
        while n >= len(items):
            if not heap:
                return None
            i, position = heap[0][3], heap[0][4]
            queue, ranked, stop = self._sources[i]
            key, record = ranked[position]
            items.append((key, record, queue))
            position += 1
            if position < stop:
                priority, newest, name = ranked[position][0]
                heapq.heapreplace(heap, (priority, newest, name, i, position))
            else:
                heapq.heappop(heap)
        return items[n]


class _Cursor:
    """A search's way through a :class:`_Sequence`: the candidates of one level of its
    tree (common ancestor ``lca``), leaving out those below ``skip`` (the level below,
    walked before, or the preemptor's queue), those of queues the search dropped, and,
    with ``cut``, from the first of priority ``cut`` or more on (the sequence is sorted
    by priority first)."""

    __slots__ = ("advantage", "current", "cut", "lca", "position", "sequence", "skip")

    def __init__(
        self,
        sequence: _Sequence,
        lca: ResourceNode | None,
        skip: ResourceNode | None,
        advantage: bool,
        cut: int | None,
    ) -> None:
        self.sequence = sequence
        self.lca = lca
        self.skip = skip
        self.advantage = advantage
        self.cut = cut
        self.position = 0
        self.current: _Item | None = None

    def advance(self, dropped: set[int]) -> bool:
        """Move :attr:`current` to the next candidate of this search's; ``False`` at the
        end."""
        sequence, cut, skip, lca = self.sequence, self.cut, self.skip, self.lca
        while True:
            item = sequence.at(self.position)
            if item is None or (cut is not None and item[0][0] >= cut):
                self.current = None
                return False
            self.position += 1
            queue = item[2]
            if id(queue) in dropped:
                continue
            if skip is not None and _below(queue, skip, lca):
                continue
            self.current = item
            return True


def _below(queue: ClusterQueueNode, node: ResourceNode, top: ResourceNode | None) -> bool:
    """Is ``node`` the queue or one of its ancestors below ``top``?"""
    current: ResourceNode | None = queue
    while current is not None and current is not top:
        if current is node:
            return True
        current = current.parent
    return False


class _Group:
    """One group of candidates (``hierarchical`` or ``by_priority``): a level of the tree
    for each cohort that adds queues to it, how many queues (those with a candidate
    their policy allows), and for each kind of attempt (without borrowing, with it) the
    priority its candidates stop at and the most they can free (:func:`_most_freed`)."""

    __slots__ = ("advantage", "cuts", "freed", "levels", "queues")

    def __init__(
        self,
        frs: frozenset[FlavorResource],
        advantage: bool,
        cut: int | None,
        borrowing_cut: int | None,
    ) -> None:
        self.advantage = advantage
        self.cuts = (cut, borrowing_cut)  # by allow_borrowing
        # each level's sequence, its cohort and the node below it already walked
        self.levels: list[tuple[_Sequence, CohortNode, ResourceNode]] = []
        self.freed = (dict.fromkeys(frs, 0), dict.fromkeys(frs, 0))  # by allow_borrowing
        self.queues = 0

    def cursors(self, allow_borrowing: bool) -> list[_Cursor]:
        """Fresh cursors, for one attempt."""
        advantage, cut = self.advantage, self.cuts[allow_borrowing]
        return [_Cursor(seq, lca, skip, advantage, cut) for seq, lca, skip in self.levels]


def classical_targets(
    state: ClusterState, request: PreemptionRequest, index: CandidateIndex | None = None
) -> list[Target]:
    """The fewest workloads to evict so that ``request`` fits, or ``[]``. ``index``
    must describe the state as it is now (see :class:`CandidateIndex`)."""
    if index is None:
        index = CandidateIndex(state)
    queue = request.queue
    frs = request.needs_preemption
    own = _own_candidates(index, request)
    if len(frs) == 1 and _cannot_fit_at_all(index, request, own):
        return []  # decided from the cohorts' totals, before any candidate is listed
    own_freed = _own_freed(own, frs)
    if _beyond_ceiling(request, own_freed):
        return []  # decided from the queue's own candidates, before the tree is walked
    # What the queue has available now; each attempt starts from the same usage.
    room = {fr: queue_available(queue, fr) for fr in frs}
    hierarchical, by_priority = _cohort_groups(index, request)
    policy = queue.spec.preemption
    forbidden = policy.borrow_within_cohort is _BORROW_NEVER
    attempts: tuple[bool, ...]
    if (not hierarchical.queues and not by_priority.queues) or (
        forbidden and not _under_nominal(request)
    ):
        attempts = (True,)
    elif forbidden and not hierarchical.queues:
        attempts = (False, True)
    else:
        attempts = (True, False)
    for allow_borrowing in attempts:
        near_freed = hierarchical.freed[allow_borrowing]
        far_freed = by_priority.freed[allow_borrowing]
        if _cannot_fit(request, room, own_freed, near_freed, far_freed, allow_borrowing):
            continue  # the attempt would take every candidate it may and still fail
        if own is not None and _others_cannot_help(request, allow_borrowing):
            targets = _attempt(state, request, ([_own_cursor(request, own)],), allow_borrowing)
            if len(targets) < 2:  # the same targets, and no order for the others to turn
                if targets:
                    return targets
                continue
        groups = (
            hierarchical.cursors(allow_borrowing),
            by_priority.cursors(allow_borrowing),
            [] if own is None else [_own_cursor(request, own)],
        )
        targets = _attempt(state, request, groups, allow_borrowing)
        if targets:
            return targets
    return []


def _attempt(
    state: ClusterState,
    request: PreemptionRequest,
    groups: tuple[list[_Cursor], ...],
    allow_borrowing: bool,
) -> list[Target]:
    """Kueue's attempt: remove the candidates in order until the workload fits, then
    give back those it can do without; ``[]`` if it never fits. Usage is as before."""
    targets: list[Target] = []
    for candidate in _in_order(request, groups):
        simulate_removal(state, candidate.record)
        targets.append(Target(candidate.record, _REASON[candidate.variant]))
        if workload_fits(request, allow_borrowing):
            targets = fill_back(state, request, targets, allow_borrowing)
            restore(state, (t.record for t in targets))
            return targets
    restore(state, (t.record for t in targets))
    return []


def _others_cannot_help(request: PreemptionRequest, allow_borrowing: bool) -> bool:
    """Does no removal from other queues change any fit check of the attempt? Then it
    ends as its queue's own candidates alone would, up to their order.

    What :func:`quota.tree.available` gives the queue is the least of what its parent
    has and the queue's cap (its borrowing limit less what it holds beyond its
    guaranteed part), plus its free guaranteed part. Removals elsewhere can only raise
    the parent's part. Removing the queue's own workloads raises both parts by the
    same amount, what the queue stops holding in its parent (every level up adds back
    exactly what its child frees), so a cap that decides now decides after any of
    them; and checks that pass now pass after any removal. Kueue then takes every
    other candidate it meets before the queue's own without fitting, fits at the same
    own one as a search of those alone, gives back the same own ones and then every
    other one, each give-back of these moving the last target into its place: the
    same targets, turned by one place per other candidate taken. With one target
    there is nothing to turn; with more, the caller runs the whole attempt."""
    queue, parent = request.queue, request.queue.parent
    if parent is None or workload_fits(request, allow_borrowing):
        return False  # an attempt that fits at once keeps its first candidate, whoever's
    for fr, amount in request.usage.items():
        if amount <= queue_available(queue, fr):
            continue
        limit = queue.quota(fr).borrowing_limit
        if limit is None:
            return False
        guaranteed = queue.guaranteed.get(fr, 0)
        cap = queue.subtree_quota.get(fr, 0) - guaranteed + limit
        held = queue.usage.get(fr, 0) - guaranteed
        if available(parent, fr) < (cap - held if held > 0 else cap):
            return False
    return True


def _own_cursor(request: PreemptionRequest, own: _Own) -> _Cursor:
    sequence = _Sequence([(request.queue, own.entry.ranked, own.stop)])
    return _Cursor(sequence, None, None, False, None)


def _in_order(
    request: PreemptionRequest, groups: tuple[list[_Cursor], ...]
) -> Iterator[_Candidate]:
    """The valid candidates of each group in turn, each group merged in victim order
    (keys end with the workload's name: unique, so merging is sorting). Checked as
    reached, against usage with earlier targets removed; a queue found back within
    nominal (or a cohort up to the common ancestor) gives no more candidates, since
    removals only lower usage while an attempt lasts. What an attempt that allows
    borrowing may not take, the cursors' cut already leaves out (:func:`_borrowing_cut`)."""
    for cursors in groups:
        dropped: set[int] = set()
        heap = [_head(c, i) for i, c in enumerate(cursors) if c.advance(dropped)]
        heapq.heapify(heap)
        while heap:
            cursor = cursors[heap[0][3]]
            item = cursor.current
            assert item is not None
            record, queue = item[1], item[2]
            variant = _variant(request, record, queue is request.queue, cursor.advantage)
            passed = variant is _Variant.WITHIN_CQ or _path_over_nominal(request, queue, cursor.lca)
            if not passed:
                dropped.add(id(queue))  # and every later candidate of this queue
            if cursor.advance(dropped):
                heapq.heapreplace(heap, _head(cursor, heap[0][3]))
            else:
                heapq.heappop(heap)
            if passed:
                yield _Candidate(record, cursor.lca, variant)


# A cursor's entry in :func:`_in_order`'s heap: its candidate's victim key, flat, then the
# cursor's number. Flat, not (key, number): the heap compares entries all the time, and a
# nested key costs two scans per comparison.
_Head = tuple[int, float, str, int]


def _head(cursor: _Cursor, i: int) -> _Head:
    assert cursor.current is not None
    priority, newest, name = cursor.current[0]
    return (priority, newest, name, i)


def _cannot_fit(
    request: PreemptionRequest,
    room: _Freed,
    own: _Freed,
    near: _Freed,
    far: _Freed,
    allow_borrowing: bool,
) -> bool:
    """Would the workload not fit even if every candidate went that an attempt could
    ever take? Then the attempt finds nothing, and it need not run.

    ``own``, ``near`` and ``far``: the most the queue's own candidates, the
    ``hierarchical`` and the ``by_priority`` groups can free in such an attempt
    (:func:`_most_freed`; for ``far``, up to :func:`_borrowing_cut` when it allows
    borrowing). A removal raises what the preemptor's queue has available by at most
    what it frees. An attempt that does not allow borrowing must fit the queue's
    nominal quota, where only its own candidates can make room. ``room``: what the
    queue has available before any removal.
    """
    queue = request.queue
    for fr in request.needs_preemption:
        amount = request.usage.get(fr, 0)
        mine = own.get(fr, 0)
        if not allow_borrowing and (
            queue.usage.get(fr, 0) - mine + amount > queue.quota(fr).nominal
        ):
            return True
        most = room[fr] + mine + near.get(fr, 0) + far.get(fr, 0)
        if amount > most:
            return True
    return False


def _cannot_fit_at_all(index: CandidateIndex, request: PreemptionRequest, own: _Own | None) -> bool:
    """Would neither attempt fit, for one contested flavor-resource?
    :func:`_beyond_ceiling`, then :func:`_cannot_fit` of both attempts, with what the
    ``hierarchical`` and ``by_priority`` groups can free bounded by
    :func:`_reclaimable`; in plain numbers, since most searches end here."""
    queue = request.queue
    (fr,) = request.needs_preemption
    mine = 0 if own is None else own.entry.sums[fr][own.stop]  # all of the queue's own
    amount = request.usage.get(fr, 0)
    used = queue.usage.get(fr, 0) - mine
    quota = queue.quota(fr)
    limit = quota.borrowing_limit
    if limit is not None and used + amount > queue.subtree_quota.get(fr, 0) + limit:
        return True  # :func:`_beyond_ceiling`
    near, far = _reclaimable(index, request, fr)
    most = queue_available(queue, fr) + mine + near
    borrow_never = queue.spec.preemption.borrow_within_cohort is _BORROW_NEVER
    if amount <= (most if borrow_never else most + far):
        return False  # the attempt that allows borrowing might fit
    return amount > most + far or used + amount > quota.nominal


def _beyond_ceiling(request: PreemptionRequest, own: _Freed) -> bool:
    """Would the workload take its queue past quota plus borrowing limit even once all
    the queue's own candidates (``own``, :func:`_own_freed`) are gone? What
    :func:`quota.tree.available` gives a queue is at most that ceiling less its
    usage, whatever the cohort frees, so then neither attempt fits."""
    queue = request.queue
    for fr in request.needs_preemption:
        limit = queue.quota(fr).borrowing_limit
        if limit is None:
            continue
        used = queue.usage.get(fr, 0) - own.get(fr, 0)
        if used + request.usage.get(fr, 0) > queue.subtree_quota.get(fr, 0) + limit:
            return True
    return False


def _own_freed(own: _Own | None, frs: frozenset[FlavorResource]) -> _Freed:
    """The most removals of the queue's own candidates can free, per flavor-resource."""
    if own is None:
        return dict.fromkeys(frs, 0)
    return {fr: own.entry.sums[fr][own.stop] for fr in frs}


def _most_freed(
    entry: _Entry, stop: int, queue: ClusterQueueNode, frs: frozenset[FlavorResource]
) -> _Freed:
    """The most an attempt can free from another queue's first ``stop`` candidates, per
    flavor-resource. It takes them only while that queue is over nominal: with one
    flavor-resource contested, at most the queue's excess plus its largest one."""
    if len(frs) == 1:
        (fr,) = frs
        return {fr: _within_excess(queue, fr, entry.sums[fr][stop], entry.largest[fr][stop])}
    return {fr: entry.sums[fr][stop] for fr in frs}


def _within_excess(queue: ClusterQueueNode, fr: FlavorResource, amount: int, largest: int) -> int:
    """What removals from ``queue`` stop at: ``amount`` at most, and nothing once the
    queue is back within nominal."""
    excess = queue.usage.get(fr, 0) - queue.subtree_quota.get(fr, 0)
    return min(amount, excess + largest) if excess > 0 else 0


def _reclaimable(
    index: CandidateIndex, request: PreemptionRequest, fr: FlavorResource
) -> tuple[int, int]:
    """:func:`_most_freed` of the ``hierarchical`` and ``by_priority`` groups, bounded
    from above by what every queue of theirs holds (not only what its policy lets
    go), from :meth:`CandidateIndex.reclaimable`: one step per level of the tree. For
    the one contested flavor-resource ``fr``."""
    queue = request.queue
    if queue.parent is None or (queue.spec.preemption.reclaim_within_cohort is _RECLAIM_NEVER):
        return 0, 0
    near = far = 0
    advantage, remaining = _fits_in_quota(queue, request.usage)
    previous: ResourceNode = queue
    node: ResourceNode | None = queue.parent
    while node is not None:
        amount = index.reclaimable_above(previous, fr)
        if advantage:
            near += amount  # and so at every level above: the advantage, once had, stays
        else:
            far += amount
            if node.parent is not None:
                advantage, remaining = _fits_in_quota(node, remaining)
        previous, node = node, node.parent
    return near, far


def _path_over_nominal(
    request: PreemptionRequest, queue: ClusterQueueNode, lca: ResourceNode | None
) -> bool:
    """Kueue's check that a candidate of another queue may still go: its queue and
    every cohort below the common ancestor still over nominal."""
    frs = request.needs_preemption
    node: ResourceNode | None = queue
    while node is not None and node is not lca:
        if is_within_nominal(node, frs):
            return False
        node = node.parent
    return True


def _under_nominal(request: PreemptionRequest) -> bool:
    queue = request.queue
    return all(queue.usage.get(fr, 0) < queue.quota(fr).nominal for fr in request.needs_preemption)


def _own_candidates(index: CandidateIndex, request: PreemptionRequest) -> _Own | None:
    """The queue's own candidates that its policy allows (Kueue's
    ``SatisfiesPreemptionPolicy``), or ``None`` if there are none."""
    preemptor = request.workload
    rule = request.queue.spec.preemption.within_cluster_queue
    if rule is _WITHIN_NEVER:
        return None
    frs = request.needs_preemption
    entry = index.candidates(request.queue, frs)
    # Sorted by priority: the allowed ones come first.
    if rule is _WITHIN_LOWER:
        stop = bisect.bisect_left(entry.priorities, preemptor.priority)
    else:
        ranked = entry.ranked[: bisect.bisect_left(entry.priorities, preemptor.priority + 1)]
        ranked = [item for item in ranked if satisfies_policy(preemptor, item[1].workload, rule)]
        entry, stop = _Entry(ranked, frs), len(ranked)
    return _Own(entry, stop) if stop else None


def _variant(
    request: PreemptionRequest, record: AdmittedWorkload, same_queue: bool, advantage: bool
) -> _Variant:
    """The variant of a candidate its policy allows."""
    if same_queue:
        return _Variant.WITHIN_CQ
    if advantage:
        return _Variant.HIERARCHICAL_RECLAIM
    policy = request.queue.spec.preemption
    if policy.borrow_within_cohort is _BORROW_NEVER:
        return _Variant.RECLAIM_WITHOUT_BORROWING
    threshold = policy.max_priority_threshold
    if record.priority >= request.workload.priority or (
        threshold is not None and record.priority > threshold
    ):
        return _Variant.RECLAIM_WITHOUT_BORROWING
    return _Variant.RECLAIM_WHILE_BORROWING


def _cohort_groups(index: CandidateIndex, request: PreemptionRequest) -> tuple[_Group, _Group]:
    """The ``hierarchical`` and ``by_priority`` groups: the candidates of the other queues
    of the tree, by whether the preemptor has the hierarchical advantage where they meet
    (its request fits the quota of the subtree they share). Each level up from the
    queue adds the queues its cohort reaches through children over nominal, less those
    of the level below; read from what the index keeps per cohort, not queue by
    queue."""
    queue, frs = request.queue, request.needs_preemption
    rule = queue.spec.preemption.reclaim_within_cohort
    cut = request.workload.priority if rule is _RECLAIM_LOWER else None
    near = _Group(frs, True, cut, cut)
    far = _Group(frs, False, cut, _borrowing_cut(request, cut))
    if queue.parent is None or rule is _RECLAIM_NEVER:
        return near, far
    advantage, remaining = _fits_in_quota(queue, request.usage)
    previous: ResourceNode = queue
    node: ResourceNode | None = queue.parent
    while node is not None:
        assert isinstance(node, CohortNode)
        group = near if advantage else far
        for borrowing in (False, True):
            queues, freed = _level_totals(index, node, previous, frs, group.cuts[borrowing])
            for fr, amount in freed.items():
                group.freed[borrowing][fr] += amount
            if not borrowing and queues:
                group.queues += queues
                group.levels.append((index.sequence(node, frs), node, previous))
        if not advantage and node.parent is not None:
            advantage, remaining = _fits_in_quota(node, remaining)
        previous, node = node, node.parent
    return near, far


def _level_totals(
    index: CandidateIndex,
    node: CohortNode,
    below: ResourceNode,
    frs: frozenset[FlavorResource],
    cut: int | None,
) -> tuple[int, _Freed]:
    """:meth:`CandidateIndex.totals` of a level: of ``node`` less what it reaches through
    ``below`` (the level below, or the preemptor's queue)."""
    queues, freed = index.totals(node, frs, cut)
    if not index.over_nominal(below, frs):
        return queues, freed  # ``node`` does not reach through it
    fewer, less = index.totals(below, frs, cut)
    return queues - fewer, {fr: amount - less[fr] for fr, amount in freed.items()}


# Before every priority: an attempt that takes no candidate of a group.
_BEFORE_ALL = -(2**63)


def _borrowing_cut(request: PreemptionRequest, cut: int | None) -> int | None:
    """Where the ``by_priority`` group's candidates stop for an attempt that allows
    borrowing: such an attempt may not take one that only reclaim without borrowing may
    (:func:`_variant`), and those are the ones from some priority on; all of them when
    the queue may never borrow to preempt."""
    policy = request.queue.spec.preemption
    if policy.borrow_within_cohort is _BORROW_NEVER:
        return _BEFORE_ALL
    priority = request.workload.priority
    threshold = policy.max_priority_threshold
    if threshold is not None:
        priority = min(priority, threshold + 1)
    return priority if cut is None else min(cut, priority)


def _fits_in_quota(
    node: ResourceNode, requests: Mapping[FlavorResource, int]
) -> tuple[bool, dict[FlavorResource, int]]:
    """Do ``requests`` fit the node's subtree quota, and what is left of each once its
    free guaranteed part (:func:`quota.tree.local_available`) is taken."""
    usage, quota, guaranteed = node.usage, node.subtree_quota, node.guaranteed
    fits = True
    remaining = {}
    for fr, amount in requests.items():
        used = usage.get(fr, 0)
        if used + amount > quota.get(fr, 0):
            fits = False
        free = guaranteed.get(fr, 0) - used if guaranteed else 0
        left = amount - free if free > 0 else amount
        remaining[fr] = left if left > 0 else 0
    return fits, remaining
