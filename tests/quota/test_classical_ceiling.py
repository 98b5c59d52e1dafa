"""A queue with a borrowing limit never holds more than its quota plus that limit, so
evicting other queues' workloads cannot make room past it; only the queue's own
candidates can (``_beyond_ceiling`` in :mod:`quota.preemption.classical`, which
refutes such searches before walking the tree). Each case is asked of the fast search
and of the plain reference, which knows nothing of the bound: both must give the
same targets, and the case says which."""

from __future__ import annotations

import pytest

from quota.cache import ClusterState
from quota.model import (
    ClusterQueueSpec,
    CohortSpec,
    FlavorQuotas,
    PodSet,
    QuotaConfig,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from quota.preemption import classical_reference
from quota.preemption.classical import classical_targets
from quota.preemption.common import PreemptionRequest
from tests.quota.h100 import CPU, CPU_FR, GPU, GPU_FR, POLICY, admit


def _state(borrowing_limit: int | None) -> ClusterState:
    """``a`` (4 GPUs, maybe a borrowing limit) and ``b`` (4 GPUs) share a cohort."""

    def queue(name: str, limit: int | None) -> ClusterQueueSpec:
        cpu_limit = None if limit is None else limit * 16  # CPUs never the tighter
        quotas = {
            GPU: ResourceQuota(4_000, borrowing_limit=limit),
            CPU: ResourceQuota(64_000, borrowing_limit=cpu_limit),
        }
        group = ResourceGroup((GPU, CPU), (FlavorQuotas("h100", quotas),))
        return ClusterQueueSpec(name, "org", (group,), preemption=POLICY)

    return ClusterState.build(
        QuotaConfig(
            flavors=("h100",),
            cohorts=(CohortSpec("org"),),
            cluster_queues=(queue("a", borrowing_limit), queue("b", None)),
        )
    )


def _admit(state: ClusterState, name: str, queue: str, gpus: int, priority: int) -> None:
    admit(state, name, queue, gpus, {GPU: 1000, CPU: 8000}, priority)


def _request(state: ClusterState, gpus: int, with_cpu: bool) -> PreemptionRequest:
    usage = {GPU_FR: gpus * 1000}
    if with_cpu:
        usage[CPU_FR] = gpus * 8000
    workload = Workload("new", "a", (PodSet("p", gpus, {GPU: 1000, CPU: 8000}),), priority=5)
    return PreemptionRequest(workload, state.queues["a"], usage, frozenset((GPU_FR,)))


# (case, a's borrowing limit, a's admitted (name, GPUs, priority), b's admitted, the
#  request's GPUs, the targets both searches must find)
CASES = [
    # a holds 6 of its ceiling of 6: b's borrowed GPUs cannot help, a's own can.
    ("at the ceiling, own victims", 2, [("a1", 4, 1), ("a2", 2, 9)], [], 2, ["a1"]),
    ("at the ceiling, no own victim", 2, [("a1", 6, 9)], [("b1", 2, 0)], 2, []),
    # b borrows 2 of a's nominal: below its ceiling (or with none) a reclaims them.
    ("no limit, reclaim", None, [("a1", 2, 9)], [("b1", 6, 0)], 2, ["b1"]),
    ("under the ceiling, reclaim", 4, [("a1", 2, 9)], [("b1", 6, 0)], 2, ["b1"]),
    # a at 4 with a ceiling of 4: even after reclaiming b's GPUs, 2 more do not fit.
    ("ceiling = nominal", 0, [("a1", 4, 9)], [("b1", 4, 0)], 2, []),
    ("ceiling = nominal, own", 0, [("a1", 2, 9), ("a2", 2, 1)], [("b1", 4, 0)], 2, ["a2"]),
]


@pytest.mark.parametrize("with_cpu", [False, True], ids=["gpu-only", "gpu-and-cpu"])
@pytest.mark.parametrize(
    ("limit", "in_a", "in_b", "gpus", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_a_queue_at_its_borrowing_limit_makes_room_only_from_its_own(
    limit: int | None,
    in_a: list[tuple[str, int, int]],
    in_b: list[tuple[str, int, int]],
    gpus: int,
    expected: list[str],
    with_cpu: bool,
) -> None:
    found = {}
    for search in (classical_targets, classical_reference.classical_targets):
        state = _state(None if limit is None else limit * 1000)
        for queue, admitted in (("a", in_a), ("b", in_b)):
            for name, count, priority in admitted:
                _admit(state, name, queue, count, priority)
        usage_before = {name: dict(node.usage) for name, node in state.queues.items()}
        targets = search(state, _request(state, gpus, with_cpu))
        found[search.__module__] = sorted(t.name for t in targets)
        # a search puts back whatever it simulates taking out
        assert {name: dict(node.usage) for name, node in state.queues.items()} == usage_before
    assert found == {
        "quota.preemption.classical": expected,
        "quota.preemption.classical_reference": expected,
    }
