"""Token rates and budgets over the cohort tree (the in-process ledger)."""

from __future__ import annotations

import copy
import random
from datetime import UTC, datetime

import pytest

from quota.config import parse_quota_config
from quota.ledger import InProcessLedger, Refusal, Reservation, period_end
from quota.resources import FlavorResource
from quota.tree import potential_available
from tests.ledgers.configs import RPM, TPM, team

K = 1000  # milli-units per token
POOL = "llama-pool"
T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC).timestamp()


def config() -> InProcessLedger:
    quota = {
        "flavors": [POOL],
        "cohorts": [{"name": "org"}],
        "cluster_queues": [
            {
                "name": "a",
                "cohort": "org",
                "resource_groups": [
                    {
                        "resources": ["tokens-per-minute", "requests-per-minute", "tokens-per-day"],
                        "flavors": [
                            {
                                "name": POOL,
                                "quotas": {
                                    "tokens-per-minute": {"nominal": 1000, "borrowing_limit": 500},
                                    "requests-per-minute": {"nominal": 10},
                                    "tokens-per-day": {"nominal": 5000},
                                },
                            }
                        ],
                    }
                ],
            },
            {
                "name": "b",
                "cohort": "org",
                "resource_groups": [
                    {
                        "resources": ["tokens-per-minute", "requests-per-minute", "tokens-per-day"],
                        "flavors": [
                            {
                                "name": POOL,
                                "quotas": {
                                    "tokens-per-minute": {"nominal": 1000, "lending_limit": 200},
                                    "requests-per-minute": {"nominal": 10},
                                    "tokens-per-day": {"nominal": 5000},
                                },
                            }
                        ],
                    }
                ],
            },
        ],
    }
    return InProcessLedger(parse_quota_config(quota))


def call(tokens: int, requests: int = 1) -> dict[str, int]:
    return {
        "tokens-per-minute": tokens * K,
        "requests-per-minute": requests * K,
        "tokens-per-day": tokens * K,
    }


def test_a_queue_borrows_what_the_cohort_lends_up_to_its_limit() -> None:
    ledger = config()
    assert isinstance(ledger.reserve("a", POOL, call(1000), T0), Reservation)
    # b lends only 200 of its 1000 (lending limit): a may take 200 more, not its 500
    assert isinstance(ledger.reserve("a", POOL, call(200), T0), Reservation)
    refused = ledger.reserve("a", POOL, call(1), T0)
    assert isinstance(refused, Refusal)
    assert (refused.resource, refused.flavor, refused.requested, refused.available) == (
        "tokens-per-minute",
        POOL,
        1 * K,
        0,
    )
    assert refused.level == "Cohort" and refused.name == "org"
    assert 0 < refused.retry_after <= 60


def test_a_lenders_non_lendable_share_stays_its_own() -> None:
    ledger = config()
    ledger.reserve("a", POOL, call(1200), T0)  # all a's own plus all b lends
    assert ledger.available("b", POOL, "tokens-per-minute", T0) == 800 * K
    assert isinstance(ledger.reserve("b", POOL, call(800), T0), Reservation)


def test_all_resources_or_none() -> None:
    ledger = config()
    for _ in range(20):  # a's 10 requests a minute, and b's 10 borrowed through the cohort
        assert isinstance(ledger.reserve("a", POOL, call(10), T0), Reservation)
    refused = ledger.reserve("a", POOL, call(10), T0)  # the 21st request of the minute
    assert isinstance(refused, Refusal) and refused.resource == "requests-per-minute"
    assert ledger.usage("a", POOL, "tokens-per-minute", T0) == 200 * K  # nothing half-taken


def test_reconcile_refunds_or_charges_the_difference() -> None:
    ledger = config()
    reservation = ledger.reserve("a", POOL, call(900), T0)
    assert isinstance(reservation, Reservation)
    ledger.reconcile(reservation, {"tokens-per-minute": 300 * K, "tokens-per-day": 300 * K}, T0 + 1)
    assert ledger.usage("a", POOL, "tokens-per-minute", T0 + 1) == 300 * K
    ledger.reconcile(reservation, {"tokens-per-minute": 1100 * K}, T0 + 2)  # an overrun is charged
    assert ledger.usage("a", POOL, "tokens-per-minute", T0 + 2) == 1100 * K
    assert ledger.usage("a", POOL, "tokens-per-day", T0 + 2) == 300 * K


def test_rates_free_up_after_a_minute_budgets_at_the_period_end() -> None:
    ledger = config()
    ledger.reserve("a", POOL, call(1000), T0)
    assert ledger.usage("a", POOL, "tokens-per-minute", T0 + 59) == 1000 * K
    assert ledger.usage("a", POOL, "tokens-per-minute", T0 + 60) == 0
    assert ledger.usage("a", POOL, "tokens-per-day", T0 + 60) == 1000 * K
    midnight = period_end("tokens-per-day", T0)
    assert ledger.usage("a", POOL, "tokens-per-day", midnight) == 0


def test_period_ends() -> None:
    assert period_end("tokens-per-minute", T0) == T0 + 60
    assert period_end("tokens-per-day", T0) == datetime(2026, 11, 23, tzinfo=UTC).timestamp()
    assert period_end("tokens-per-month", T0) == datetime(2026, 12, 1, tzinfo=UTC).timestamp()
    with pytest.raises(ValueError):
        period_end("gpu-hours", T0)


def test_random_traffic_stays_within_limits_and_drains_to_zero() -> None:
    rng = random.Random(7)
    ledger = config()
    live: list[Reservation] = []
    now = T0
    for _ in range(2000):
        now += rng.random() * 0.5
        queue = rng.choice("ab")
        if live and rng.random() < 0.3:
            reservation = live.pop(rng.randrange(len(live)))
            used = rng.randrange(0, reservation.amounts["tokens-per-minute"] // K + 1) * K
            ledger.reconcile(reservation, {"tokens-per-minute": used, "tokens-per-day": used}, now)
            continue
        result = ledger.reserve(queue, POOL, call(rng.randrange(1, 300)), now)
        if isinstance(result, Reservation):
            live.append(result)
        a = ledger.usage("a", POOL, "tokens-per-minute", now)
        b = ledger.usage("b", POOL, "tokens-per-minute", now)
        # a: nominal 1000 + what b lends (200); b: its own 800 + the cohort pool (1200)
        assert a <= 1200 * K and b <= 2000 * K and a + b <= 2000 * K
    end = period_end("tokens-per-day", now) + 1
    for queue in "ab":
        for resource in ("tokens-per-minute", "requests-per-minute", "tokens-per-day"):
            assert ledger.usage(queue, POOL, resource, end) == 0
    assert all(n.usage.get(fr, 0) == 0 for n in ledger.state.cohorts.values() for fr in n.usage)


@pytest.mark.parametrize("seed", [1, 22, 333])
def test_a_refused_call_fits_exactly_when_its_refusal_says(seed: int) -> None:
    """Whatever the traffic before, a refused call that waits ``retry_after`` (and no
    other call comes meanwhile) is granted then, and would still be refused just before."""
    rng = random.Random(seed)
    ledger = InProcessLedger(team())
    queues = [q.name for q in team().cluster_queues if q.name != "lonely"]
    live: list[Reservation] = []
    now, checked = T0, 0
    for _ in range(600):
        now += rng.choice([0.0, rng.random(), rng.random() * 5])
        if live and rng.random() < 0.3:
            reservation = live.pop(rng.randrange(len(live)))
            actual = {r: rng.randrange(0, 2 * a + 2) for r, a in reservation.amounts.items()}
            ledger.reconcile(reservation, actual, now)
            continue
        queue = rng.choice(queues)
        resources = [r for r in (TPM, RPM) if ledger.state.queues[queue].quotas.get(fr(r))]
        amounts = {r: rng.randrange(1, 400 if r == TPM else 4) * K for r in resources}
        result = ledger.reserve(queue, POOL, amounts, now)
        if isinstance(result, Reservation):
            live.append(result)
            continue
        node = ledger.state.queues[queue]
        if any(a > potential_available(node, fr(r)) for r, a in amounts.items()):
            continue  # can never fit: the gateway answers 400 before asking
        assert result.retry_after == max(result.reset_after.values()) > 0
        later = now + result.retry_after
        assert isinstance(copy.deepcopy(ledger).reserve(queue, POOL, amounts, later), Reservation)
        before = copy.deepcopy(ledger).reserve(queue, POOL, amounts, later - 1e-3)
        assert isinstance(before, Refusal)
        checked += 1
    assert checked > 50


def fr(resource: str) -> FlavorResource:
    return FlavorResource(POOL, resource)
