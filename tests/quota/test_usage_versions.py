"""``ClusterState.usage_version``: what lets the preemptor keep a one-resource search
across cycles. It must move whenever what such a search reads may have changed (a
workload using the flavor-resource admitted or released in the tree, a new budget
period) and stand otherwise, or the searches kept are never reused."""

from __future__ import annotations

from datetime import UTC, datetime

from quota.cache import AdmittedWorkload, ClusterState
from quota.model import (
    Admission,
    ClusterQueueSpec,
    CohortSpec,
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
H100, A100 = FlavorResource("h100", GPU), FlavorResource("a100", GPU)


def _state() -> ClusterState:
    """``a`` and ``b`` share cohort ``org``; ``solo`` is a tree of its own."""
    group = ResourceGroup(
        (GPU,), tuple(FlavorQuotas(f, {GPU: ResourceQuota(8_000)}) for f in ("h100", "a100"))
    )
    queues = tuple(
        ClusterQueueSpec(name, cohort, (group,))
        for name, cohort in (("a", "org"), ("b", "org"), ("solo", None))
    )
    return ClusterState.build(
        QuotaConfig(flavors=("h100", "a100"), cohorts=(CohortSpec("org"),), cluster_queues=queues)
    )


def _record(name: str, queue: str, flavor: str) -> AdmittedWorkload:
    workload = Workload(name, queue, (PodSet("p", 1, {GPU: 1_000}),))
    admission = Admission(queue, (PodSetAssignment("p", 1, {GPU: flavor}),))
    return AdmittedWorkload(workload, admission, admission.usage(workload), 0.0)


def _versions(state: ClusterState) -> dict[tuple[str, FlavorResource], int]:
    return {
        (queue, fr): state.usage_version(state.queues[queue], fr)
        for queue in ("a", "b", "solo")
        for fr in (H100, A100)
    }


def test_an_admission_or_release_moves_its_flavor_resource_in_its_tree_only() -> None:
    state = _state()
    before = _versions(state)
    state.admit(_record("w1", "a", "h100"))
    after = _versions(state)
    moved = {key for key in before if after[key] != before[key]}
    # b shares a's tree; a100 and the other tree are untouched
    assert moved == {("a", H100), ("b", H100)}
    state.release("w1")
    again = _versions(state)
    assert {key for key in after if again[key] != after[key]} == moved


def test_a_simulated_removal_moves_nothing() -> None:
    state = _state()
    record = _record("w1", "a", "h100")
    state.admit(record)
    before = _versions(state)
    with state.freed([record], (H100, A100)):
        pass
    assert _versions(state) == before


def test_a_new_budget_period_moves_every_one_and_a_tick_inside_it_none() -> None:
    state = _state()
    state.admit(_record("w1", "a", "h100"))
    before = _versions(state)
    assert not state.advance(datetime(2026, 11, 20, tzinfo=UTC))
    assert _versions(state) == before
    assert state.advance(datetime(2026, 12, 1, tzinfo=UTC))
    after = _versions(state)
    assert all(after[key] != before[key] for key in before)
