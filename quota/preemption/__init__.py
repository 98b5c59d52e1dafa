"""Choosing preemption victims: classical (Kueue's default) or fair sharing."""

from __future__ import annotations

from quota.cache import ClusterState
from quota.model import ReclaimWithinCohort, WithinClusterQueue
from quota.preemption.classical import classical_targets
from quota.preemption.common import PreemptionReason, PreemptionRequest, Target
from quota.preemption.fair import fair_targets

__all__ = ["PreemptionReason", "PreemptionRequest", "Preemptor", "Target"]


class Preemptor:
    """Finds targets against the live state, which it leaves as it found it."""

    def __init__(self, state: ClusterState, *, fair_sharing: bool = False) -> None:
        self.state = state
        self.fair_sharing = fair_sharing

    def targets(self, request: PreemptionRequest) -> list[Target]:
        policy = request.queue.spec.preemption
        if policy.within_cluster_queue is WithinClusterQueue.NEVER and (
            policy.reclaim_within_cohort is ReclaimWithinCohort.NEVER
        ):
            return []  # nothing may ever be evicted for this queue
        if self.fair_sharing:
            return fair_targets(self.state, request)
        return classical_targets(self.state, request)
