"""What the hand-built preemption cases share: one flavor (``h100``) of GPUs and CPUs,
the preemption policy of the benchmark's queues, and admitting a workload there."""

from __future__ import annotations

from quota.cache import AdmittedWorkload, ClusterState
from quota.model import (
    Admission,
    PodSet,
    PodSetAssignment,
    PreemptionPolicy,
    ReclaimWithinCohort,
    WithinClusterQueue,
    Workload,
)
from quota.resources import FlavorResource

GPU, CPU = "nvidia.com/gpu", "cpu"
GPU_FR, CPU_FR = FlavorResource("h100", GPU), FlavorResource("h100", CPU)
POLICY = PreemptionPolicy(
    within_cluster_queue=WithinClusterQueue.LOWER_PRIORITY,
    reclaim_within_cohort=ReclaimWithinCohort.ANY,
)


def admit(
    state: ClusterState, name: str, queue: str, pods: int, per_pod: dict[str, int], priority: int
) -> None:
    """Admit ``pods`` pods of ``per_pod`` (GPU and CPU amounts) in ``h100``, after
    everything admitted before it."""
    usage = {FlavorResource("h100", r): amount * pods for r, amount in per_pod.items()}
    workload = Workload(name, queue, (PodSet("p", pods, per_pod),), priority)
    admission = Admission(queue, (PodSetAssignment("p", pods, dict.fromkeys(per_pod, "h100")),))
    state.admit(AdmittedWorkload(workload, admission, usage, float(len(state.admitted))))
