"""The fair-sharing admission order keeps each tree's tournament across pops and
scores again only the contenders whose path meets the popped entry's
(quota/fair_iterator.py); the reference builds every tournament afresh
(tests/quota/fair_order_reference.py). Random fair-sharing trees and streams of
additions, cycles and completions through both: identical decisions every cycle."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from quota import scheduler
from quota.model import QuotaConfig
from tests.quota import fair_order_reference
from tests.quota.test_churn_equivalence import fair_churn, play
from tests.quota.test_properties import BASE, Op


@settings(BASE, max_examples=300)
@given(fair_churn())
def test_the_kept_tournament_orders_as_a_fresh_one_each_pop(
    case: tuple[QuotaConfig, list[Op]],
) -> None:
    config, ops = case
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(scheduler, "fair_sharing_order", fair_order_reference.fair_sharing_order)
        want = play(config, ops, False)
    got = play(config, ops, False)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a == b, f"step {i} differs"
