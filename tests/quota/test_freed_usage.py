"""``ClusterState.freed``: the fit checks' cheap way to see the cluster without some
workloads. It sums each queue's records and changes only the flavor-resources asked
about, so it must leave every node's usage of those exactly as taking the workloads
away one at a time does (``detach``), or as their ending now does (``release``), and
put everything back afterwards."""

from __future__ import annotations

from datetime import timedelta
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from quota.cache import AdmittedWorkload, ClusterState
from quota.model import Admission, PodSet, PodSetAssignment, QuotaConfig, Workload
from quota.resources import FlavorResource
from quota.tree import ResourceNode
from tests.quota.test_budgets import GPU, GPU_HOURS, HOUR, engine, job, queue
from tests.quota.test_properties import BASE, _resources_of, between, quota_configs

AMOUNTS = (250, 500, 1000, 3000)

Usage = dict[tuple[str, FlavorResource], int]


def _usage(state: ClusterState, frs: list[FlavorResource]) -> Usage:
    nodes: list[ResourceNode] = [*state.queues.values(), *state.cohorts.values()]
    return {(node.name, fr): node.usage.get(fr, 0) for node in nodes for fr in frs}


@st.composite
def held_workloads(
    draw: st.DrawFn,
) -> tuple[QuotaConfig, list[tuple[int, dict[int, int]]], list[int], list[int]]:
    """A tree, workloads held in it (queue index, {flavor-resource index: amount}),
    which of them go and which flavor-resources are asked about."""
    config = draw(quota_configs())
    held = [
        (
            between(draw, 0, 62),
            {between(draw, 0, 5): AMOUNTS[between(draw, 0, 3)] for _ in range(between(draw, 1, 3))},
        )
        for _ in range(between(draw, 1, 12))
    ]
    gone = [i for i in range(len(held)) if between(draw, 0, 1)]
    asked = [i for i in range(6) if between(draw, 0, 1)]
    return config, held, gone, asked


@settings(BASE, max_examples=300)
@given(held_workloads())
def test_freed_usage_is_the_usage_without_the_workloads(case: tuple[Any, ...]) -> None:
    config, held, gone, asked = case
    state = ClusterState.build(config)
    frs = [FlavorResource(f, r) for f in config.flavors for r in _resources_of(config)]
    queues = list(state.queues.values())
    records = []
    for number, (queue_index, amounts) in enumerate(held):
        name = queues[queue_index % len(queues)].name
        workload = Workload(f"w{number}", name, (PodSet("p", 1, {}),))
        usage = {frs[i % len(frs)]: amount for i, amount in amounts.items()}
        admission = Admission(name, (PodSetAssignment("p", 1, {}),))
        record = AdmittedWorkload(workload, admission, usage, 0.0)
        state.attach(record)
        records.append(record)
    asked_frs = list({frs[i % len(frs)]: None for i in asked})
    leaving = [records[i] for i in gone]
    before = _usage(state, frs)

    for record in leaving:
        state.detach(record)
    expected = _usage(state, asked_frs)
    for record in reversed(leaving):
        state.attach(record)
    assert _usage(state, frs) == before
    with state.freed(leaving, asked_frs):
        assert _usage(state, asked_frs) == expected
        # what was not asked about is not touched
        untouched = [fr for fr in frs if fr not in asked_frs]
        assert _usage(state, untouched) == {k: v for k, v in before.items() if k[1] in untouched}
    assert _usage(state, frs) == before


def test_freed_as_ended_charges_what_the_runs_used_as_release_does() -> None:
    budget = FlavorResource("h100", GPU_HOURS)
    gpus = FlavorResource("h100", GPU)

    def running() -> Any:
        e = engine(
            [
                queue("team-a", {"nominal": 100, "lending_limit": 20}, cohort="research", gpus=16),
                queue("team-b", {"nominal": 100}, cohort="research", gpus=16),
            ],
            ["research"],
        )
        e.add(job("a1", "team-a", 8, 10))
        e.add(job("a2", "team-a", 8, 5))
        e.add(job("b1", "team-b", 8, Fraction(3, 2)))
        e.schedule()
        e.advance_to(e.state.now + timedelta(seconds=3 * HOUR))
        return e

    freed, released = running(), running()
    assert set(freed.admitted) == {"a1", "a2", "b1"}
    gone = ["a1", "a2", "b1"]
    before = _usage(freed.state, [budget, gpus])
    with freed.state.freed([freed.admitted[n] for n in gone], (budget, gpus), ended=True):
        inside = _usage(freed.state, [budget, gpus])
    for name in gone:
        released.state.release(name)
    assert inside == _usage(released.state, [budget, gpus])
    # what they committed (their max runtimes) gave way to what they ran: less, and
    # no GPU held any more
    assert inside["team-a", gpus] == inside["team-b", gpus] == 0
    assert 0 < inside["research", budget] < before["research", budget]
    assert _usage(freed.state, [budget, gpus]) == before


def test_made_up_resources_leave_no_key_behind() -> None:
    """A hostile tenant naming a new resource in every workload: none is admitted,
    and the shared keys and every node's usage stay those of the quotas."""
    e = engine([queue("team-a", {"nominal": 100}, cohort="research", gpus=16)], ["research"])
    keys = dict(e.state._keys)
    for i in range(50):
        e.add(
            Workload(
                f"x{i}",
                "team-a",
                (PodSet("main", 1, {GPU: 1000, f"example.com/made-up-{i}": 1000}),),
                max_runtime=Fraction(HOUR),
            )
        )
    e.schedule()
    assert not e.admitted
    assert e.state._keys == keys
    configured = set(keys)
    for node in [*e.state.queues.values(), *e.state.cohorts.values()]:
        assert set(node.usage) <= configured
