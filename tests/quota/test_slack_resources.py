"""A preemption search asked about a workload's whole usage, but for room in some of
its flavor-resources only, decides as if asked without each other flavor-resource that
fits wherever the search goes (``_without_slack`` in :mod:`quota.preemption`): it
fits what the queue has available now and every subtree quota from the queue to the
root, and removals only lower usage. The nomination's second search (the whole
assignment, after each flavor's simulation) then costs nothing.

Each case asks the fast preemptor (while nomination runs) and the plain reference,
which knows nothing of the shortcut: both must give the targets the case names, and
the case says whether CPU was judged slack. Where CPU is the blocker, dropping it
would find victims that cannot make room."""

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
from quota.preemption import Preemptor, _without_slack
from quota.preemption.common import PreemptionRequest
from tests.quota.h100 import CPU, CPU_FR, GPU, GPU_FR, POLICY, admit


def _state(cpu_lending_limit: int | None) -> ClusterState:
    """``a`` and ``b`` (4 GPUs, 32 CPUs each) and ``c`` (CPUs only, all borrowed) share
    a cohort: 8 GPUs and 64 CPUs in all. ``a`` may lend only part of its CPUs."""

    def queue(name: str, gpus: int, cpus: int, lend: int | None) -> ClusterQueueSpec:
        quotas = {GPU: ResourceQuota(gpus * 1000), CPU: ResourceQuota(cpus, lending_limit=lend)}
        group = ResourceGroup((GPU, CPU), (FlavorQuotas("h100", quotas),))
        return ClusterQueueSpec(name, "org", (group,), preemption=POLICY)

    return ClusterState.build(
        QuotaConfig(
            flavors=("h100",),
            cohorts=(CohortSpec("org"),),
            cluster_queues=(
                queue("a", 4, 32_000, cpu_lending_limit),
                queue("b", 4, 32_000, None),
                queue("c", 0, 0, None),
            ),
        )
    )


def _admit(state: ClusterState, name: str, queue: str, gpus: int, cpus: int, priority: int) -> None:
    admit(state, name, queue, 1, {GPU: gpus * 1000, CPU: cpus}, priority)


# (case, a's CPU lending limit, a1's CPUs, c1's CPUs, the request's CPUs, judged slack,
#  the targets). a1 holds 1 GPU (priority 9); b1 holds 6 GPUs (priority 0), 2 of them
#  borrowed; the request asks for 2 GPUs, with room needed in GPUs only.
CASES = [
    ("cpu fits everywhere", None, 8_000, 16_000, 16_000, True, ["b1"]),
    ("cpu fits, none asked", None, 8_000, 16_000, 0, True, ["b1"]),
    # The cohort has 8 CPUs left and no GPU candidate frees any: nothing makes room.
    ("the cohort is out of cpu", None, 8_000, 48_000, 16_000, False, []),
    # a would borrow CPUs: the request no longer fits a's quota, so a loses its
    # advantage over b (hierarchical reclaim), and may not reclaim while borrowing.
    ("a would borrow cpu", None, 24_000, 16_000, 16_000, False, []),
    # a keeps 24 of its 32 CPUs; c borrowed the 8 it lends and b's 32: the cohort is
    # full, and what a needs must come from what it keeps.
    ("a lent what it needs", 8_000, 16_000, 40_000, 16_000, False, []),
    ("a keeps what it needs", 8_000, 8_000, 40_000, 16_000, True, ["b1"]),
]


@pytest.mark.parametrize(
    ("lend", "a_cpus", "c_cpus", "cpus", "slack", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_a_flavor_resource_that_fits_wherever_the_search_goes_changes_nothing(
    lend: int | None, a_cpus: int, c_cpus: int, cpus: int, slack: bool, expected: list[str]
) -> None:
    found = {}
    for reference in (False, True):
        state = _state(lend)
        _admit(state, "a1", "a", 1, a_cpus, 9)
        _admit(state, "b1", "b", 6, 0, 0)
        _admit(state, "c1", "c", 0, c_cpus, 0)
        workload = Workload("new", "a", (PodSet("p", 1, {GPU: 2000, CPU: cpus}),), priority=5)
        usage = {GPU_FR: 2000, CPU_FR: cpus}
        request = PreemptionRequest(workload, state.queues["a"], usage, frozenset((GPU_FR,)))
        preemptor = Preemptor(state, reference=reference)
        with preemptor.frozen():
            found[reference] = sorted(t.name for t in preemptor.targets(request))
        if not reference:
            kept = _without_slack(request).usage
            assert kept == ({GPU_FR: 2000} if slack else usage)
    assert found == {False: expected, True: expected}
