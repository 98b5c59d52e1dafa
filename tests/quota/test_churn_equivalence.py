"""The fast preemption searches decide exactly what the plain ones do.

:mod:`quota.preemption.classical` (candidate index, lazy merge, streams dropped
once their queue is back within nominal) against
:mod:`quota.preemption.classical_reference` (collect and sort everything, every
time), and :mod:`quota.preemption.fair` (shares from kept quota data, searches
that can evict nothing cut short) against :mod:`quota.preemption.fair_reference`:
random quota trees (cohorts with borrowing and lending limits, every
preemption policy incl. reclaim Any / LowerPriority and within LowerPriority /
LowerOrNewerEqualPriority, borrowWithinCohort thresholds, fair sharing on and
off), random streams of additions, cycles and completions. Each
cycle's decisions must be identical: who is admitted where with what usage, who
is preempted by whom and why, every pending reason. Fair sharing has tests of
its own, on trees made for it (weights, nested cohorts, queues outside any
cohort, GPU-hour budgets).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from quota.engine import QuotaEngine
from quota.model import (
    ClusterQueueSpec,
    CohortSpec,
    FlavorFungibility,
    FlavorQuotas,
    PreemptionPolicy,
    QuotaConfig,
    ReclaimWithinCohort,
    ResourceGroup,
    ResourceQuota,
    WithinClusterQueue,
    Workload,
)
from quota.periods import BudgetPeriod
from quota.scheduler import CycleResult
from tests.quota import test_budget_properties as budget_cases
from tests.quota.test_properties import (
    BASE,
    BORROW,
    STRATEGIES,
    THRESHOLDS,
    WEIGHTS,
    WHEN_BORROW,
    WHEN_PREEMPT,
    Op,
    TickClock,
    between,
    pick,
    quota_configs,
    workload_list,
)

# Policies that preempt, drawn more often than "Never" so most examples evict.
WITHIN = st.sampled_from(
    [
        WithinClusterQueue.LOWER_PRIORITY,
        WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY,
        WithinClusterQueue.NEVER,
    ]
)
RECLAIM = st.sampled_from(
    [ReclaimWithinCohort.ANY, ReclaimWithinCohort.LOWER_PRIORITY, ReclaimWithinCohort.NEVER]
)


QUOTAS = st.sampled_from([0, 1000, 1000, 2000, 2000, 3000, 4000])
CHURN_LIMITS = st.none() | st.sampled_from([0, 1000, 2000])


def contended_group(draw: st.DrawFn, flavors: list[str], resources: list[str]) -> ResourceGroup:
    """One resource group over ``flavors``: small nominal quotas, maybe a borrowing
    limit, and half the time a lending limit of half the nominal."""
    return ResourceGroup(
        resources=tuple(resources),
        flavors=tuple(
            FlavorQuotas(
                name=flavor,
                quotas={
                    r: ResourceQuota(
                        nominal=(nominal := draw(QUOTAS)),
                        borrowing_limit=draw(CHURN_LIMITS),
                        lending_limit=None if draw(st.booleans()) else nominal // 2,
                    )
                    for r in resources
                },
            )
            for flavor in flavors
        ),
    )


def tight_config(draw: st.DrawFn) -> QuotaConfig:
    """A contended tree: 2-6 queues under one or two cohorts (the second nested in
    the first half the time), 1-2 flavors of one or two resources, small nominal
    quotas with borrowing and lending limits, every preemption policy."""
    flavors = [f"f{i}" for i in range(between(draw, 1, 2))]
    resources = [f"r{i}" for i in range(between(draw, 1, 2))]
    cohorts = [CohortSpec(name="c0")]
    if draw(st.booleans()):
        parent = "c0" if draw(st.booleans()) else None
        cohorts.append(CohortSpec(name="c1", parent=parent))
    queues = []
    for i in range(between(draw, 2, 6)):
        chosen = flavors if len(flavors) == 1 or draw(st.booleans()) else flavors[::-1]
        group = contended_group(draw, chosen, resources)
        queues.append(
            ClusterQueueSpec(
                name=f"q{i}",
                cohort=cohorts[between(draw, 0, len(cohorts) - 1)].name,
                resource_groups=(group,),
                queueing_strategy=draw(STRATEGIES),
                preemption=PreemptionPolicy(
                    within_cluster_queue=draw(WITHIN),
                    reclaim_within_cohort=draw(RECLAIM),
                    borrow_within_cohort=draw(BORROW),
                    max_priority_threshold=draw(THRESHOLDS),
                ),
                flavor_fungibility=FlavorFungibility(
                    when_can_borrow=draw(WHEN_BORROW), when_can_preempt=draw(WHEN_PREEMPT)
                ),
            )
        )
    return QuotaConfig(
        flavors=tuple(flavors),
        cohorts=tuple(cohorts),
        cluster_queues=tuple(queues),
        # The fair-sharing search is the same on both paths: most examples go classical.
        fair_sharing=between(draw, 0, 3) == 0,
    )


def fair_config(draw: st.DrawFn) -> QuotaConfig:
    """A contended tree for fair sharing: 2-7 queues (one in eight outside any
    cohort) under up to three cohorts nested up to three deep, some holding quota of
    their own; fair weights incl. 0 and 1/2 on queues and cohorts; 1-2 flavors of
    1-2 resources with borrowing and lending limits; every preemption policy."""
    flavors = [f"f{i}" for i in range(between(draw, 1, 2))]
    resources = [f"r{i}" for i in range(between(draw, 1, 2))]

    def group(chosen: list[str]) -> ResourceGroup:
        return contended_group(draw, chosen, resources)

    cohorts: list[CohortSpec] = []
    for i in range(between(draw, 1, 3)):
        # Mostly nested: shares are then compared below the root, and an eviction's
        # usage reaches the compared node through lending limits on the way.
        nested = cohorts and between(draw, 0, 3) > 0
        cohorts.append(
            CohortSpec(
                name=f"c{i}",
                parent=pick(draw, [c.name for c in cohorts]) if nested else None,
                resource_groups=(group(flavors),) if between(draw, 0, 3) == 0 else (),
                fair_weight=draw(WEIGHTS),
            )
        )
    queues = []
    for i in range(between(draw, 2, 7)):
        chosen = flavors if len(flavors) == 1 or draw(st.booleans()) else flavors[::-1]
        queues.append(
            ClusterQueueSpec(
                name=f"q{i}",
                cohort=None
                if between(draw, 0, 7) == 0
                else cohorts[0 if i == 0 else between(draw, 0, len(cohorts) - 1)].name,
                resource_groups=(group(chosen),),
                queueing_strategy=draw(STRATEGIES),
                preemption=PreemptionPolicy(
                    within_cluster_queue=draw(WITHIN),
                    reclaim_within_cohort=draw(RECLAIM),
                    borrow_within_cohort=draw(BORROW),
                    max_priority_threshold=draw(THRESHOLDS),
                ),
                flavor_fungibility=FlavorFungibility(
                    when_can_borrow=draw(WHEN_BORROW), when_can_preempt=draw(WHEN_PREEMPT)
                ),
                fair_weight=draw(WEIGHTS),
            )
        )
    return QuotaConfig(
        flavors=tuple(flavors),
        cohorts=tuple(cohorts),
        cluster_queues=tuple(queues),
        fair_sharing=True,
    )


@st.composite
def churn(draw: st.DrawFn) -> tuple[QuotaConfig, list[Op]]:
    config = tight_config(draw) if draw(st.integers(0, 3)) else draw(quota_configs())
    return config, churn_ops(draw, config)


@st.composite
def fair_churn(draw: st.DrawFn) -> tuple[QuotaConfig, list[Op]]:
    if draw(st.integers(0, 3)):
        config = fair_config(draw)
    else:
        config = replace(draw(quota_configs()), fair_sharing=True)
    return config, churn_ops(draw, config)


def churn_ops(draw: st.DrawFn, config: QuotaConfig) -> list[Op]:
    workloads = workload_list(draw, config, max_size=30)
    ops: list[Op] = []
    for i, workload in enumerate(workloads):
        # Late arrivals of higher priority are what makes preemption happen.
        if i >= len(workloads) // 2 and draw(st.booleans()):
            workload = Workload(
                name=workload.name,
                cluster_queue=workload.cluster_queue,
                pod_sets=workload.pod_sets,
                priority=min(2, workload.priority + between(draw, 0, 2)),
                created=workload.created,
            )
        ops.append(("add", workload))
        for _ in range(between(draw, 0, 2)):
            kind = between(draw, 0, 3)
            if kind in (0, 1):
                ops.append(("cycles", between(draw, 1, 3)))
            else:
                ops.append(("finish", between(draw, 0, len(workloads) - 1)))
    ops.append(("settle",))
    return ops


def decisions(result: CycleResult) -> dict[str, Any]:
    return {
        "heads": result.heads,
        "admitted": [
            (r.name, r.admission, r.usage, r.admitted_at) for r in result.admitted_records
        ],
        "preempted": [r.name for r in result.preempted_records],
        "preemptions": result.preemptions,
        "reasons": result.reasons,
    }


def play(config: QuotaConfig, ops: list[Op], reference: bool) -> list[Any]:
    engine = QuotaEngine(config, clock=TickClock(), reference_preemption=reference)
    log: list[Any] = []
    names: list[str] = []
    for op in ops:
        if op[0] == "add":
            engine.add(op[1])
            names.append(op[1].name)
        elif op[0] == "cycles":
            log.extend(decisions(r) for r in engine.cycles(op[1]))
        elif op[0] == "settle":
            log.extend(decisions(r) for r in engine.cycles(200))
        elif op[1] < len(names) and names[op[1]] in engine.admitted:
            engine.finish(names[op[1]])
            log.append(("finished", names[op[1]]))
    log.append(("admitted", sorted(engine.admitted)))
    log.append(("pending", sorted(w.name for w in engine.pending())))
    return log


@settings(BASE, max_examples=300)
@given(churn())
def test_fast_preemption_decides_as_the_reference(case: tuple[QuotaConfig, list[Op]]) -> None:
    config, ops = case
    fast, reference = play(config, ops, False), play(config, ops, True)
    for i, (got, want) in enumerate(zip(fast, reference, strict=True)):
        assert got == want, f"step {i} differs"


@settings(BASE, max_examples=400)
@given(fair_churn())
def test_fast_fair_sharing_preemption_decides_as_the_reference(
    case: tuple[QuotaConfig, list[Op]],
) -> None:
    config, ops = case
    fast, reference = play(config, ops, False), play(config, ops, True)
    for i, (got, want) in enumerate(zip(fast, reference, strict=True)):
        assert got == want, f"step {i} differs"


def play_budgets(config: QuotaConfig, ops: list[Op], reference: bool) -> list[Any]:
    """The ops of test_budget_properties (advances of the budget clock, finishes,
    deletes) through one engine; every cycle's decisions."""
    tick = iter(range(1, 10**6))
    engine = QuotaEngine(
        config,
        clock=lambda: float(next(tick)),
        now=budget_cases.START,
        reference_preemption=reference,
    )
    log: list[Any] = []
    names: list[str] = []
    for op in ops:
        kind = op[0]
        if kind == "add":
            names.append(op[1].name)
            engine.add(op[1])
        elif kind in ("cycles", "settle"):
            log.extend(decisions(r) for r in engine.cycles(op[1] if kind == "cycles" else 200))
        elif kind == "advance":
            engine.advance_to(engine.now + timedelta(seconds=op[1]))
            log.append(("advanced", sorted(engine.admitted)))
        elif op[1] < len(names):
            name = names[op[1]]
            if name in engine.admitted or (
                kind == "delete" and any(w.name == name for w in engine.pending())
            ):
                (engine.finish if kind == "finish" else engine.delete)(name)
                log.append((kind, name))
    log.append(("admitted", sorted(engine.admitted)))
    log.append(("pending", sorted(w.name for w in engine.pending())))
    return log


@st.composite
def budget_churn(draw: st.DrawFn) -> tuple[QuotaConfig, list[Op]]:
    period = draw(st.sampled_from(list(BudgetPeriod)))
    config, ops = draw(budget_cases.cases(period))
    return replace(config, fair_sharing=True), ops


@settings(BASE, max_examples=150)
@given(budget_churn())
def test_fair_sharing_with_budgets_decides_as_the_reference(
    case: tuple[QuotaConfig, list[Op]],
) -> None:
    """GPU-hour budgets are flavor-resources of the tree that shares leave out."""
    config, ops = case
    fast, reference = play_budgets(config, ops, False), play_budgets(config, ops, True)
    for i, (got, want) in enumerate(zip(fast, reference, strict=True)):
        assert got == want, f"step {i} differs"


def test_the_benchmark_churn_decides_as_the_reference() -> None:
    """bench/admission.py --preemption at a small size (reclaim Any, within
    LowerPriority, two flavors, a two-level tree): hundreds of evictions, and the
    same decisions in every cycle."""
    import random

    from bench.admission import build_config, build_workloads

    config = build_config(20, preemption=True)
    workloads = build_workloads(600, 20, random.Random(3))
    logs = []
    for reference in (False, True):
        engine = QuotaEngine(config, clock=TickClock(), reference_preemption=reference)
        for workload in workloads:
            engine.add(workload)
        logs.append([decisions(r) for r in engine.cycles(150)])
    fast, slow = logs
    assert sum(len(c["preempted"]) for c in slow) > 50
    for i, (got, want) in enumerate(zip(fast, slow, strict=True)):
        assert got == want, f"cycle {i + 1} differs"
