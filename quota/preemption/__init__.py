"""Choosing preemption victims: classical (Kueue's default) or fair sharing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from quota.cache import ClusterState
from quota.model import ReclaimWithinCohort, WithinClusterQueue
from quota.preemption import classical_reference
from quota.preemption.classical import CandidateIndex, classical_targets
from quota.preemption.common import PreemptionReason, PreemptionRequest, Target
from quota.preemption.fair import fair_targets

__all__ = ["PreemptionReason", "PreemptionRequest", "Preemptor", "Target"]


class Preemptor:
    """Finds targets against the live state, which it leaves as it found it.

    ``reference`` selects the plain classical search (for tests that compare the two;
    the decisions are the same)."""

    def __init__(
        self, state: ClusterState, *, fair_sharing: bool = False, reference: bool = False
    ) -> None:
        self.state = state
        self.fair_sharing = fair_sharing
        self.reference = reference
        self._index = CandidateIndex(state)
        self._frozen = False

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """While the caller changes neither admitted workloads nor usage (beyond what
        each search puts back), searches share one :class:`CandidateIndex`."""
        self._index.refresh()
        self._frozen = True
        try:
            yield
        finally:
            self._frozen = False

    def targets(self, request: PreemptionRequest) -> list[Target]:
        policy = request.queue.spec.preemption
        if policy.within_cluster_queue is WithinClusterQueue.NEVER and (
            policy.reclaim_within_cohort is ReclaimWithinCohort.NEVER
        ):
            return []  # nothing may ever be evicted for this queue
        if self.fair_sharing:
            return fair_targets(self.state, request)
        if self.reference:
            return classical_reference.classical_targets(self.state, request)
        return classical_targets(self.state, request, self._index if self._frozen else None)
