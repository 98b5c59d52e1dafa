"""Each queue's admitted workloads in victim order, kept as workloads are admitted and
released (``ClusterQueueNode.victims``), read by both preemption searches instead of
sorting: after any sequence of admissions, releases, simulations (``without``) and
budget recounts it is the queue's admitted workloads sorted by :func:`victim_order`."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from quota.cache import AdmittedWorkload, ClusterState, victim_order
from quota.model import (
    Admission,
    ClusterQueueSpec,
    FlavorQuotas,
    PodSet,
    PodSetAssignment,
    QuotaConfig,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from quota.resources import FlavorResource

GPU = "nvidia.com/gpu"
QUEUES = ("a", "b")


def _state() -> ClusterState:
    group = ResourceGroup((GPU,), (FlavorQuotas("h100", {GPU: ResourceQuota(8_000)}),))
    queues = tuple(ClusterQueueSpec(name=q, resource_groups=(group,)) for q in QUEUES)
    return ClusterState.build(QuotaConfig(flavors=("h100",), cluster_queues=queues))


def _record(number: int, queue: str, priority: int, admitted_at: float) -> AdmittedWorkload:
    workload = Workload(f"w{number:02d}", queue, (PodSet("p", 1, {GPU: 1000}),), priority)
    admission = Admission(queue, (PodSetAssignment("p", 1, {GPU: "h100"}),))
    return AdmittedWorkload(workload, admission, {FlavorResource("h100", GPU): 1000}, admitted_at)


operations = st.lists(
    st.one_of(
        # few priorities and admission times: ties fall through to the name
        st.tuples(
            st.just("admit"),
            st.integers(0, 29),
            st.sampled_from(QUEUES),
            st.integers(0, 2),
            st.sampled_from([0.0, 1.0, 1.0, 2.5]),
        ),
        st.tuples(st.just("release"), st.integers(0, 29)),
        st.tuples(st.just("freed"), st.lists(st.integers(0, 29), max_size=4)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_each_queue_keeps_its_admitted_workloads_in_victim_order(
    ops: list[tuple[Any, ...]],
) -> None:
    state = _state()

    def check() -> None:
        for queue in state.queues.values():
            expected = sorted(queue.admitted.values(), key=victim_order)
            assert [record for _, record in queue.victims] == expected
            assert all(key == victim_order(record) for key, record in queue.victims)

    for op in ops:
        match op:
            case ("admit", number, queue, priority, admitted_at):
                if f"w{number:02d}" not in state.admitted:
                    state.admit(_record(int(number), str(queue), int(priority), admitted_at))
            case ("release", number):
                if f"w{number:02d}" in state.admitted:
                    state.release(f"w{number:02d}")
            case ("freed", numbers):
                gone = {f"w{n:02d}" for n in numbers} & set(state.admitted)
                frs = [FlavorResource("h100", GPU)]
                with state.freed((state.admitted[name] for name in sorted(gone)), frs):
                    pass
        check()
