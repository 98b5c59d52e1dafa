"""The budget clock keeps its period's bounds: ``ClusterState.advance`` must say a new
period began exactly when the period's start moved, whatever the time zone, the
direction of the step, or a clock set behind its back."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import pytest

from quota.cache import ClusterState
from quota.model import QuotaConfig
from quota.periods import BudgetPeriod, period_start

START = datetime(2026, 12, 31, 22, 0, tzinfo=UTC)
ZONES = (UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8)))


def _rolled(kind: BudgetPeriod, before: datetime, after: datetime) -> bool:
    return period_start(kind, after) != period_start(kind, before)


@pytest.mark.parametrize("kind", list(BudgetPeriod))
def test_a_new_period_is_reported_exactly_when_its_start_moves(kind: BudgetPeriod) -> None:
    rng = random.Random(kind.value)
    state = ClusterState.build(QuotaConfig(budget_period=kind))
    state.now = START
    rolls = 0
    for _ in range(3000):
        # Mostly small steps forward (a replay's events), some long, some back, around
        # the period's boundaries, in several time zones.
        hours = rng.choice((0.0, 0.5, 3.0, 23.99, 24.0, 24 * 6.5, 24 * 31.0, -5.0))
        moment = (state.now + timedelta(hours=hours)).astimezone(rng.choice(ZONES))
        if rng.random() < 0.02:  # set directly, as the engine does at start
            state.now = moment - timedelta(days=40)
        expected = _rolled(kind, state.now, moment)
        assert state.advance(moment) is expected, (state.now, moment)
        rolls += expected
    assert rolls > 10  # the walk did cross periods


def test_naive_moments_are_read_as_utc() -> None:
    state = ClusterState.build(QuotaConfig(budget_period=BudgetPeriod.DAY))
    state.now = datetime(2026, 11, 5, 23, 0)
    assert state.advance(datetime(2026, 11, 5, 23, 59, tzinfo=UTC)) is False
    assert state.advance(datetime(2026, 11, 6, 0, 0)) is True
    assert state.advance(datetime(2026, 11, 6, 1, 0, tzinfo=timezone(timedelta(hours=1)))) is False


IST = timezone(timedelta(hours=5, minutes=30))


@pytest.mark.parametrize(
    ("kind", "now", "moment", "rolled"),
    [
        # A moment on a boundary starts the next period.
        (
            BudgetPeriod.DAY,
            datetime(2026, 11, 5, 23, tzinfo=UTC),
            datetime(2026, 11, 6, tzinfo=UTC),
            True,
        ),
        (
            BudgetPeriod.DAY,
            datetime(2026, 11, 6, tzinfo=UTC),
            datetime(2026, 11, 6, 23, 59, tzinfo=UTC),
            False,
        ),
        (
            BudgetPeriod.WEEK,
            datetime(2026, 11, 29, 12, tzinfo=UTC),
            datetime(2026, 11, 30, tzinfo=UTC),
            True,
        ),
        (
            BudgetPeriod.MONTH,
            datetime(2026, 12, 31, 23, tzinfo=UTC),
            datetime(2027, 1, 1, tzinfo=UTC),
            True,
        ),
        # 05:29 in India is still the 5th in UTC.
        (
            BudgetPeriod.DAY,
            datetime(2026, 11, 5, 12, tzinfo=UTC),
            datetime(2026, 11, 6, 5, 29, tzinfo=IST),
            False,
        ),
        (
            BudgetPeriod.DAY,
            datetime(2026, 11, 5, 12, tzinfo=UTC),
            datetime(2026, 11, 6, 5, 30, tzinfo=IST),
            True,
        ),
        # Back into the previous period.
        (
            BudgetPeriod.MONTH,
            datetime(2026, 12, 1, tzinfo=UTC),
            datetime(2026, 11, 30, 23, tzinfo=UTC),
            True,
        ),
    ],
)
def test_boundaries(kind: BudgetPeriod, now: datetime, moment: datetime, rolled: bool) -> None:
    state = ClusterState.build(QuotaConfig(budget_period=kind))
    state.now = now
    assert state.advance(moment) is rolled
