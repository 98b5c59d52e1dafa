"""A cycle that keeps its evictions out of usage as they are issued (``shadow``) answers
every fit check, and every reading of a queue's own usage, exactly as one that sums
all of them again at each check, and leaves usage as it found it.

Random quota trees (lending limits, borrowing limits, nested cohorts, and GPU-hour
budgets whose real use an eviction charges) with workloads admitted by the engine;
then random steps of one cycle's processing: evictions, reservations (negative ones
too, which write a queue's usage past the tree), fit checks with targets of their
own, readings of a queue's usage. The engine's own streams, with and without the
shadow, are compared in ``test_churn_equivalence.py``; this holds the cycle to it step
by step, where a reservation or a check rarely lands in those streams.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from quota.cache import ClusterState
from quota.engine import QuotaEngine
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
from quota.periods import BudgetPeriod
from quota.preemption import PreemptionReason, Target
from quota.resources import FlavorResource
from quota.scheduler import _Cycle
from tests.quota import test_budget_properties as budget_cases
from tests.quota.test_properties import BASE, TickClock, between, quota_configs, workload_list

AMOUNTS = st.sampled_from([-1000, -500, 0, 500, 1000, 2000, 4000, 8000])
HOURS = st.sampled_from([1, 3, 20])
SETTINGS = settings(BASE, max_examples=150)

Step = tuple[Any, ...]


def steps(draw: Any, queues: int, frs: int, records: int) -> list[Step]:
    """Indices into the state's queues, flavor-resources and admitted records (by name)."""

    def usage() -> dict[int, int]:
        return {between(draw, 0, frs - 1): draw(AMOUNTS) for _ in range(between(draw, 1, 2))}

    def some_records() -> list[int]:
        return (
            [between(draw, 0, records - 1) for _ in range(between(draw, 0, 3))] if records else []
        )

    script: list[Step] = []
    for _ in range(between(draw, 1, 14)):
        kind = between(draw, 0, 3)
        queue = between(draw, 0, queues - 1)
        if kind == 0:
            script.append(("preempt", some_records()))
        elif kind == 1:
            script.append(("reserve", queue, usage()))
        elif kind == 2:
            script.append(("fits", queue, usage(), some_records()))
        else:
            script.append(("used", queue, between(draw, 0, frs - 1)))
    return script


def play(
    state: ClusterState, script: list[Step], frs: list[FlavorResource], shadow: bool
) -> list[object]:
    """One cycle's steps, as the scheduler takes them; what each check and reading said."""
    queues = sorted(state.queues.values(), key=lambda q: q.name)
    records = sorted(state.admitted.values(), key=lambda r: r.name)
    cycle = _Cycle(state, shadow=shadow)
    answers: list[object] = []

    def targets(indices: list[int]) -> list[Target]:
        # As the scheduler does: what is already preempted is never a target again.
        chosen = {
            records[i].name: records[i] for i in indices if records[i].name not in cycle.preempted
        }
        return [
            Target(record, PreemptionReason.IN_COHORT_RECLAMATION) for record in chosen.values()
        ]

    for step in script:
        kind = step[0]
        if kind == "preempt":
            cycle.preempt("preemptor", targets(step[1]))
        elif kind == "reserve":
            cycle.reserve(queues[step[1]], {frs[i]: amount for i, amount in step[2].items()})
        elif kind == "fits":
            usage = {frs[i]: max(amount, 0) for i, amount in step[2].items()}
            answers.append(cycle.fits(queues[step[1]], usage, targets(step[3])))
        else:
            answers.append(cycle.used(queues[step[1]], frs[step[2]]))
    cycle.release_reservations()
    return answers


def usages(state: ClusterState) -> dict[str, dict[FlavorResource, int]]:
    nodes = [*state.queues.values(), *state.cohorts.values()]
    return {node.name: {fr: v for fr, v in node.usage.items() if v} for node in nodes}


def check(engine: QuotaEngine, draw: Any) -> None:
    state = engine.state
    frs = sorted({fr for queue in state.queues.values() for fr in queue.quotas})
    if not frs:
        return
    script = steps(draw, len(state.queues), len(frs), len(state.admitted))
    before = usages(state)
    summed = play(state, script, frs, shadow=False)
    assert usages(state) == before
    shadowed = play(state, script, frs, shadow=True)
    assert usages(state) == before
    assert shadowed == summed


def settled(config: QuotaConfig, workloads: list[Workload]) -> QuotaEngine:
    engine = QuotaEngine(config, clock=TickClock())
    for workload in workloads:
        engine.add(workload)
    engine.schedule()
    return engine


@SETTINGS
@given(st.data())
def test_shadow_answers_as_summing_at_each_check(data: st.DataObject) -> None:
    config = data.draw(quota_configs())
    engine = settled(config, workload_list(data.draw, config))
    check(engine, data.draw)


@SETTINGS
@given(st.data())
def test_shadow_answers_as_summing_at_each_check_with_budgets(data: st.DataObject) -> None:
    config, ops = data.draw(budget_cases.cases(BudgetPeriod.MONTH))
    engine = settled(config, [op[1] for op in ops if op[0] == "add"])
    # Runs that have run a while: evicting one charges what it really used.
    engine.advance_to(engine.now + timedelta(hours=data.draw(HOURS)))
    check(engine, data.draw)


def test_a_negative_reservation_puts_the_evictions_back_first() -> None:
    """q0 keeps 1,000 of its 2,000 to itself (lending limit) and uses 1,500: 500 stored
    in the cohort. Evicting q0's 500 frees room in the cohort; a negative reservation on
    q0 then lowers its usage to 1,000 without the cohort seeing it, and the eviction,
    summed then, frees nothing there (q0 is within what it keeps). A shadow that kept the
    eviction applied across that write would leave the cohort 500 lighter than summing
    says, and q1 would fit 1,000 where it has room for 500."""
    fr = FlavorResource("f0", "r0")

    def group(nominal: int, lending: int | None = None) -> tuple[ResourceGroup, ...]:
        quota = ResourceQuota(nominal=nominal, lending_limit=lending)
        return (ResourceGroup(("r0",), (FlavorQuotas("f0", {"r0": quota}),)),)

    config = QuotaConfig(
        flavors=("f0",),
        cohorts=(CohortSpec("c"),),
        cluster_queues=(
            ClusterQueueSpec("q0", cohort="c", resource_groups=group(2000, lending=1000)),
            ClusterQueueSpec("q1", cohort="c", resource_groups=group(1000)),
        ),
    )
    sizes = {"w0": ("q0", 1000), "w1": ("q0", 500), "w2": ("q1", 1000)}
    engine = settled(
        config,
        [
            Workload(name, queue, (PodSet("p", 1, {"r0": amount}),), created=float(i))
            for i, (name, (queue, amount)) in enumerate(sizes.items())
        ],
    )
    state = engine.state
    assert set(state.admitted) == set(sizes)
    q0, q1 = state.queues["q0"], state.queues["q1"]
    before = usages(state)
    for shadow in (False, True):
        cycle = _Cycle(state, shadow=shadow)
        cycle.preempt("p", [Target(state.admitted["w1"], PreemptionReason.IN_CLUSTER_QUEUE)])
        cycle.reserve(q0, {fr: -500})
        assert cycle.used(q0, fr) == 1000
        assert cycle.fits(q1, {fr: 500}, [])
        assert not cycle.fits(q1, {fr: 1000}, [])
        cycle.release_reservations()
        assert usages(state) == before
