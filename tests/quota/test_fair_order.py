"""The fair-sharing admission order keeps each tree's tournament across pops and
scores again only the contenders whose path meets the popped entry's
(quota/fair_iterator.py); the reference builds every tournament afresh
(tests/quota/fair_order_reference.py). Random fair-sharing trees and streams of
additions, cycles and completions through both: identical decisions every cycle."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quota import scheduler
from quota.model import (
    ClusterQueueSpec,
    CohortSpec,
    FlavorQuotas,
    PreemptionPolicy,
    QuotaConfig,
    ReclaimWithinCohort,
    ResourceGroup,
    ResourceQuota,
)
from tests.quota import fair_order_reference
from tests.quota.test_churn_equivalence import WEIGHTS, churn_ops, fair_churn, play
from tests.quota.test_properties import BASE, Op, between


def assert_orders_as_the_reference(config: QuotaConfig, ops: list[Op]) -> None:
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(scheduler, "fair_sharing_order", fair_order_reference.fair_sharing_order)
        want = play(config, ops, False)
    got = play(config, ops, False)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a == b, f"step {i} differs"


@settings(BASE, max_examples=300)
@given(fair_churn())
def test_the_kept_tournament_orders_as_a_fresh_one_each_pop(
    case: tuple[QuotaConfig, list[Op]],
) -> None:
    assert_orders_as_the_reference(*case)


@st.composite
def two_teams_of_queues(draw: st.DrawFn) -> tuple[QuotaConfig, list[Op]]:
    """Where keeping a tournament can go wrong: two sub-cohorts of three queues each
    under one root that holds most of the quota, so several heads of one sub-cohort
    contend in a cycle and admitting one of them changes its sub-cohort's share."""
    quota = ResourceQuota(nominal=between(draw, 0, 2) * 1000)
    groups = (
        ResourceGroup(resources=("r0",), flavors=(FlavorQuotas(name="f0", quotas={"r0": quota}),)),
    )
    root = ResourceQuota(nominal=between(draw, 4, 12) * 1000)
    config = QuotaConfig(
        flavors=("f0",),
        cohorts=(
            CohortSpec(
                name="org",
                resource_groups=(
                    ResourceGroup(
                        resources=("r0",), flavors=(FlavorQuotas(name="f0", quotas={"r0": root}),)
                    ),
                ),
            ),
            CohortSpec(name="a", parent="org", fair_weight=draw(WEIGHTS)),
            CohortSpec(name="b", parent="org", fair_weight=draw(WEIGHTS)),
        ),
        cluster_queues=tuple(
            ClusterQueueSpec(
                name=f"{team}{i}",
                cohort=team,
                resource_groups=groups,
                preemption=PreemptionPolicy(reclaim_within_cohort=ReclaimWithinCohort.ANY),
            )
            for team in ("a", "b")
            for i in range(3)
        ),
        fair_sharing=True,
    )
    return config, churn_ops(draw, config)


@settings(BASE, max_examples=200)
@given(two_teams_of_queues())
def test_the_kept_tournament_scores_a_team_again_after_admitting_one_of_it(
    case: tuple[QuotaConfig, list[Op]],
) -> None:
    assert_orders_as_the_reference(*case)
