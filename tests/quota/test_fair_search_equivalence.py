"""The fast fair-sharing search, one search at a time, against the reference.

tests/quota/test_churn_equivalence.py plays whole streams through the engine;
here the searches themselves are compared on states the scheduler would rarely
reach (queues over their quota anywhere in nested cohorts, lending limits on the
way up, weights of 0 and 1/2), many searches per state with one
:class:`~quota.preemption.fair.FairIndex` kept across them while workloads come
and go: :func:`quota.preemption.fair.fair_targets` must return what
:func:`quota.preemption.fair_reference.fair_targets` returns and leave the tree
as it found it; and a share after an eviction, computed without touching the
tree, must be the share the tree shows after the eviction.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from quota.cache import AdmittedWorkload, ClusterQueueNode, ClusterState
from quota.fair_sharing import DRS, compare_drs, dominant_resource_share
from quota.model import (
    Admission,
    ClusterQueueSpec,
    CohortSpec,
    FlavorQuotas,
    PodSet,
    PodSetAssignment,
    PreemptionPolicy,
    QuotaConfig,
    ReclaimWithinCohort,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from quota.preemption import fair, fair_reference
from quota.preemption.common import PreemptionRequest
from quota.resources import FlavorResource
from tests.quota.test_churn_equivalence import fair_config
from tests.quota.test_properties import BASE, PRIORITIES, between, pick

AMOUNTS = st.sampled_from([0, 500, 1000, 1000, 2000, 3000])


def admitted(draw: st.DrawFn, queue: ClusterQueueNode, i: int) -> AdmittedWorkload:
    """A workload of ``queue`` in one of its flavors, whatever room there is."""
    flavor = pick(draw, sorted(queue.flavor_resources))
    resources = sorted(queue.flavor_resources[flavor])
    count = between(draw, 1, 3)
    workload = Workload(
        name=f"w{i}",
        cluster_queue=queue.name,
        pod_sets=(PodSet("p", count, {r: draw(AMOUNTS) for r in resources}),),
        priority=draw(PRIORITIES),
        created=float(between(draw, 0, 20)),
    )
    admission = Admission(
        queue.name, (PodSetAssignment("p", count, dict.fromkeys(resources, flavor)),)
    )
    # Admission times repeat on purpose: the name then orders the victims.
    return AdmittedWorkload(
        workload, admission, admission.usage(workload), float(between(draw, 0, 30))
    )


Step = tuple[str, Any]


@st.composite
def searches(draw: st.DrawFn) -> tuple[ClusterState, list[Step]]:
    config = fair_config(draw)
    state = ClusterState.build(config)
    queues = [state.queues[q.name] for q in config.cluster_queues]
    count = 0
    for _ in range(between(draw, 0, 24)):
        state.admit(admitted(draw, pick(draw, queues), count))
        count += 1
    steps: list[Step] = []
    for _ in range(between(draw, 1, 12)):
        kind = between(draw, 0, 5)
        if kind == 0:
            steps.append(("admit", admitted(draw, pick(draw, queues), count)))
            count += 1
        elif kind == 1 and count:
            steps.append(("release", between(draw, 0, count - 1)))
        else:
            queue = pick(draw, queues)
            flavor = pick(draw, sorted(queue.flavor_resources))
            frs = sorted(queue.flavor_resources[flavor].values())
            usage = {fr: draw(AMOUNTS) for fr in frs}
            needs = frozenset(fr for fr in frs if draw(st.booleans())) or frozenset(frs[:1])
            workload = Workload(
                name=f"p{count}",
                cluster_queue=queue.name,
                pod_sets=(),
                priority=draw(PRIORITIES),
                created=float(between(draw, 0, 20)),
            )
            count += 1
            steps.append(("search", PreemptionRequest(workload, queue, usage, needs)))
    return state, steps


def usage_of(state: ClusterState) -> list[tuple[str, dict[FlavorResource, int]]]:
    nodes = [*state.queues.values(), *state.cohorts.values()]
    return [(n.name, {fr: v for fr, v in n.usage.items() if v}) for n in nodes]


@settings(BASE, max_examples=1000)
@given(searches())
def test_fast_fair_search_finds_the_reference_targets(
    case: tuple[ClusterState, list[Step]],
) -> None:
    state, steps = case
    index = fair.FairIndex(state)
    for kind, value in steps:
        if kind == "admit":
            state.admit(value)
        elif kind == "release":
            name = f"w{value}"
            if name in state.admitted:
                state.release(name)
        else:
            before = usage_of(state)
            want = fair_reference.fair_targets(state, value)
            assert usage_of(state) == before
            got = fair.fair_targets(state, value, index)
            assert usage_of(state) == before
            assert [(t.name, t.reason) for t in got] == [(t.name, t.reason) for t in want]


def key_of(share: DRS) -> fair.Key:
    """What :data:`quota.preemption.fair.Key` stands for."""
    if share.zero_weight_borrows:
        return (True, share.ratio)
    return (False, share.weighted)


@settings(BASE, max_examples=300)
@given(searches())
def test_share_after_an_eviction_is_the_share_the_tree_shows(
    case: tuple[ClusterState, list[Step]],
) -> None:
    state, _ = case
    index = fair.FairIndex(state)
    queues = list(state.queues.values())
    shares: list[tuple[DRS, fair.Key]] = []
    for target in queues:
        for preemptor in queues:
            if target.parent is None or state.root_of(target) is not state.root_of(preemptor):
                continue
            if preemptor is target:
                continue
            pair = index.pair(preemptor, target)
            mine, theirs = fair_reference._almost_lcas(preemptor, target)
            assert (pair.mine.node, pair.theirs.node) == (mine, theirs)
            for node in (mine, theirs):
                share = dominant_resource_share(node)
                assert index.key(node) == (key_of(share), share.borrowing)
                shares.append((share, key_of(share)))
            for record in target.admitted.values():
                fast = pair.theirs.key_without(pair.path, record.usage)
                state.refund(target, record.usage)
                share = dominant_resource_share(theirs)
                state.charge(target, record.usage)
                assert fast == key_of(share)
                shares.append((share, fast))
    # compare_drs is the order of the keys.
    for a, key_a in shares[:40]:
        for b, key_b in shares[:40]:
            assert compare_drs(a, b) == (key_a > key_b) - (key_a < key_b)


def test_an_eviction_that_leaves_the_share_as_it_was_passes_at_equal_shares() -> None:
    """Where the early end must not be taken: the preemptor's share equals the
    target queue's, and evicting B (of a resource that is not the queue's dominant
    one) leaves that share as it was, so B goes (at or below the final share) and
    the workload fits."""

    def group(r0: int, r1: int) -> tuple[ResourceGroup, ...]:
        quotas = {"r0": ResourceQuota(nominal=r0), "r1": ResourceQuota(nominal=r1)}
        return (ResourceGroup(resources=("r0", "r1"), flavors=(FlavorQuotas("f", quotas),)),)

    reclaim = PreemptionPolicy(reclaim_within_cohort=ReclaimWithinCohort.ANY)
    config = QuotaConfig(
        flavors=("f",),
        cohorts=(CohortSpec("c", resource_groups=group(2000, 0)),),
        cluster_queues=tuple(
            ClusterQueueSpec(name, "c", group(1000, 1000), preemption=reclaim)
            for name in ("q0", "q1")
        ),
        fair_sharing=True,
    )
    state = ClusterState.build(config)
    r0, r1 = FlavorResource("f", "r0"), FlavorResource("f", "r1")

    def admit(name: str, queue: str, usage: dict[FlavorResource, int], priority: int) -> None:
        workload = Workload(name, queue, (), priority=priority)
        state.admit(AdmittedWorkload(workload, Admission(queue, ()), usage, 1.0))

    admit("a", "q1", {r0: 2000}, 1)  # q1 borrows 1000 of r0: share 1000 * 1000 / 4000
    admit("b", "q1", {r1: 1500}, 0)  # and 500 of r1: 500 * 1000 / 2000, the same
    admit("c", "q0", {r0: 1000}, 0)
    preemptor = Workload("p", "q0", (), priority=2)
    # With it, q0 borrows 1000 of r0: the same share as q1's.
    request = PreemptionRequest(
        preemptor, state.queues["q0"], {r0: 1000, r1: 1000}, frozenset((r0, r1))
    )
    want = fair_reference.fair_targets(state, request)
    assert [t.name for t in want] == ["b"]
    assert [t.name for t in fair.fair_targets(state, request)] == ["b"]
