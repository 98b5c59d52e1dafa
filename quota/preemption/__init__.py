"""Choosing preemption victims: classical (Kueue's default) or fair sharing."""

from __future__ import annotations

from quota.cache import ClusterQueueNode, ClusterState
from quota.model import ReclaimWithinCohort, WithinClusterQueue, Workload
from quota.preemption import classical_reference, fair_reference
from quota.preemption.classical import CandidateIndex, classical_targets
from quota.preemption.common import PreemptionReason, PreemptionRequest, Target
from quota.preemption.fair import FairIndex, fair_targets
from quota.resources import FlavorResource
from quota.tree import ResourceNode, queue_available

__all__ = ["PreemptionReason", "PreemptionRequest", "Preemptor", "Target"]

_NEWER_EQUAL = WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY

_RequestKey = tuple[int, str, tuple[tuple[FlavorResource, int], ...], frozenset[FlavorResource]]
# A request for room in one flavor-resource as the classical search reads it: the
# queue, the flavor-resource and amount, the preemptor's priority (and its order time
# where LowerOrNewerEqualPriority compares it).
_KeptKey = tuple[str, str, str, int, int, float | None]
_MAX_KEPT = 16_384
# Kept searches are swept of the stale once they number this many, and then again
# whenever they have doubled since the last sweep.
_FIRST_SWEEP = 1_024


class Preemptor:
    """Finds targets against the live state, which it leaves as it found it.

    ``reference`` selects the plain searches, classical and fair sharing (for tests
    that compare them with the fast ones; the decisions are the same)."""

    def __init__(
        self, state: ClusterState, *, fair_sharing: bool = False, reference: bool = False
    ) -> None:
        self.state = state
        self.fair_sharing = fair_sharing
        self.reference = reference
        self._index = CandidateIndex(state)
        self._fair = FairIndex(state)  # holds nothing that usage changes: only swept
        self._frozen = False
        # While frozen: the targets found for each request, by the preemptor (kept so
        # its id is not reused), its queue, usage and flavor-resources. Nomination asks
        # the same twice: a flavor's simulation for a one-pod-set workload is the
        # request of its whole assignment. Not for the reference searches (the tests
        # hold this one to them).
        self._found: dict[_RequestKey, tuple[Workload, list[Target]]] = {}
        # Across cycles: classical searches for room in one flavor-resource alone
        # (each flavor's simulation), with the tree's ``usage_version`` of it then. A
        # head set aside comes back when quota is released in its tree, often in
        # another flavor than this one. Keys and values are tuples of strings,
        # numbers and (mostly empty) tuples of targets, which the garbage collector
        # stops tracking: a busy engine holds many long-lived objects, and each one
        # more brings its full collections sooner.
        self._kept: dict[_KeptKey, tuple[int, tuple[Target, ...]]] = {}
        self._sweep_at = _FIRST_SWEEP

    def frozen(self) -> _Frozen:
        """A context in which the caller changes neither admitted workloads nor usage
        (beyond what each search puts back): searches share one :class:`CandidateIndex`."""
        return _Frozen(self)

    def _freeze(self) -> None:
        if len(self._kept) >= self._sweep_at:
            self._sweep_kept()
        self._index.refresh()
        self._fair.sweep()
        self._found.clear()
        self._frozen = True

    def _thaw(self) -> None:
        self._frozen = False
        self._found.clear()
        self._index.release()

    def targets(self, request: PreemptionRequest) -> list[Target]:
        policy = request.queue.spec.preemption
        if policy.within_cluster_queue is WithinClusterQueue.NEVER and (
            policy.reclaim_within_cohort is ReclaimWithinCohort.NEVER
        ):
            return []  # nothing may ever be evicted for this queue
        if self.reference:
            if self.fair_sharing:
                return fair_reference.fair_targets(self.state, request)
            return classical_reference.classical_targets(self.state, request)
        if not self._frozen:
            return self._search(request)
        if not self.fair_sharing:
            if len(request.usage) > len(request.needs_preemption):
                request = _without_slack(request)
            needs = request.needs_preemption
            if len(request.usage) == 1 and len(needs) == 1 and not needs.isdisjoint(request.usage):
                return self._one_resource(request)
        workload = request.workload
        key = (
            id(workload),
            request.queue.name,
            tuple(request.usage.items()),
            request.needs_preemption,
        )
        known = self._found.get(key)
        if known is None or known[0] is not workload:
            known = self._found[key] = (workload, self._search(request))
        return list(known[1])

    def _one_resource(self, request: PreemptionRequest) -> list[Target]:
        """:meth:`_search` of a classical request for room in its one flavor-resource,
        kept while the tree's usage of it stands (:meth:`ClusterState.usage_version`):
        that, the policies and the preemptor's priority (and order time) are all the
        search reads."""
        ((fr, amount),) = request.usage.items()
        queue, workload = request.queue, request.workload
        newer = queue.spec.preemption.within_cluster_queue is _NEWER_EQUAL
        order = workload.order_time if newer else None
        key = (queue.name, fr.flavor, fr.resource, amount, workload.priority, order)
        version = self.state.usage_version(queue, fr)
        kept = self._kept.get(key)
        if kept is not None and kept[0] == version:
            return list(kept[1])
        found = self._search(request)
        if len(self._kept) >= _MAX_KEPT:
            self._kept.clear()
        self._kept[key] = (version, tuple(found))
        return found

    def _sweep_kept(self) -> None:
        """Forget the kept searches whose usage has moved since: none of them is
        used again, and their targets hold the records of workloads that may have
        ended long ago (in a busy tree, most of a full store's). Swept when the store
        has doubled, the cost is a step per search kept."""
        queues, version = self.state.queues, self.state.usage_version
        self._kept = {
            key: kept
            for key, kept in self._kept.items()
            if kept[0] == version(queues[key[0]], FlavorResource(key[1], key[2]))
        }
        self._sweep_at = max(_FIRST_SWEEP, 2 * len(self._kept))

    def _search(self, request: PreemptionRequest) -> list[Target]:
        if self.fair_sharing:
            return fair_targets(self.state, request, self._fair)
        return classical_targets(self.state, request, self._index if self._frozen else None)


class _Frozen:
    """:meth:`Preemptor.frozen`: a class, not a @contextmanager, which stays interpreted
    Python even when the engine is compiled; every cycle enters it."""

    __slots__ = ("preemptor",)

    def __init__(self, preemptor: Preemptor) -> None:
        self.preemptor = preemptor

    def __enter__(self) -> None:
        self.preemptor._freeze()

    def __exit__(self, *exc: object) -> None:
        self.preemptor._thaw()


def _without_slack(request: PreemptionRequest) -> PreemptionRequest:
    """The request less each flavor-resource it needs no room in that fits whatever
    removals a classical search makes, which then decides exactly as with them.

    Such a one fits what the queue has available now, and every node from the queue
    (whose subtree quota is its nominal quota) to the root holds it within its
    subtree quota: so the hierarchical advantage (``_fits_in_quota``) is decided by
    the others alone, and since removals only lower usage, every fit test it takes
    part in passes, with borrowing or without. Nomination then finds the search its
    flavor's simulation already made (:meth:`Preemptor._one_resource`): the drain of
    ``bench/admission.py`` asks for CPU everywhere and needs room in GPUs only."""
    queue = request.queue
    usage = request.usage
    needs = request.needs_preemption
    kept = {}
    for fr, amount in usage.items():
        if fr in needs or not _slack(queue, fr, amount):
            kept[fr] = amount
    if len(kept) == len(usage):
        return request
    return PreemptionRequest(request.workload, queue, kept, needs)


def _slack(queue: ClusterQueueNode, fr: FlavorResource, amount: int) -> bool:
    if amount > queue_available(queue, fr):
        return False
    # As ``_fits_in_quota`` walks up: what a node keeps free of its own is taken first.
    left = amount
    node: ResourceNode | None = queue
    while node is not None:
        used = node.usage.get(fr, 0)
        if used + left > node.subtree_quota.get(fr, 0):
            return False
        free = node.guaranteed.get(fr, 0) - used
        if free > 0:
            left = left - free if left > free else 0
        node = node.parent
    return True
