"""GPU-hour budgets through the engine's public face: why a workload waits
(InsufficientBudget, ExceedsMaxBudget, MaxRuntimeRequired) and
``QuotaEngine.charge``, the gateway's way to load what a ledger charged."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

import pytest

from quota import QuotaEngine, ReasonCode, Workload, WorkloadError, parse_quota_config
from quota.budgets import format_hours
from quota.model import PodSet
from quota.reasons import BlockerLevel
from quota.resources import FlavorResource

GPU, GPU_HOURS = "nvidia.com/gpu", "nvidia.com/gpu-hours"
START = datetime(2026, 11, 1, tzinfo=UTC)
HOUR = 3600


def queue(
    name: str,
    gpu_hours: dict[str, Any],
    *,
    cohort: str | None = None,
    gpus: int = 64,
    metered: str = GPU,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "name": name,
        **({"cohort": cohort} if cohort else {}),
        "resource_groups": [
            {
                "resources": [metered, f"{metered}-hours"],
                "flavors": [
                    {
                        "name": "h100",
                        "quotas": {metered: {"nominal": gpus}, f"{metered}-hours": gpu_hours},
                    }
                ],
            }
        ],
        **extra,
    }


def job(
    name: str,
    cluster_queue: str,
    gpus: int,
    hours: float | Fraction | None,
    *,
    created: float = 0,
    resource: str = GPU,
) -> Workload:
    return Workload(
        name,
        cluster_queue,
        (PodSet("main", count=gpus, requests={resource: 1000}),),
        created=created,
        max_runtime=None if hours is None else Fraction(str(hours)) * HOUR,
    )


def engine(queues: list[dict[str, Any]], cohorts: tuple[str, ...] | list[str] = ()) -> QuotaEngine:
    config = parse_quota_config(
        {
            "flavors": ["h100"],
            "cohorts": [{"name": c} for c in cohorts],
            "cluster_queues": queues,
        }
    )
    return QuotaEngine(config, clock=iter(range(1, 10**6)).__next__, now=START)  # type: ignore[arg-type]


@dataclass
class Case:
    queues: list[dict[str, Any]]
    running: list[Workload]
    waiting: Workload
    code: ReasonCode
    message: str
    level: tuple[BlockerLevel, str] | None = None
    cohorts: list[str] = field(default_factory=list)
    before: Callable[[QuotaEngine], None] | None = None


REASONS = {
    "the cohort's pool is short": Case(
        queues=[
            queue("team-a", {"nominal": 0}, cohort="research"),
            queue("team-b", {"nominal": 100}, cohort="research"),
        ],
        cohorts=["research"],
        running=[job("b-run", "team-b", 8, 11)],  # 88 of the cohort's 100
        waiting=job("a-wait", "team-a", 8, 8),  # 64
        code=ReasonCode.INSUFFICIENT_BUDGET,
        message="needs 64 GPU-hours, 12 left in cohort research for h100",
        level=(BlockerLevel.COHORT, "research"),
    ),
    "the queue's borrowing limit binds": Case(
        queues=[
            queue("team-a", {"nominal": 60, "borrowing_limit": 10}, cohort="research"),
            queue("team-b", {"nominal": 100}, cohort="research"),
        ],
        cohorts=["research"],
        running=[job("a-run", "team-a", 2, 29)],  # 58: 60 - 58 + 10 = 12 left
        waiting=job("a-wait", "team-a", 4, 16),  # 64
        code=ReasonCode.INSUFFICIENT_BUDGET,
        message="needs 64 GPU-hours, 12 left in cluster queue team-a for h100",
        level=(BlockerLevel.CLUSTER_QUEUE, "team-a"),
    ),
    "a queue without a cohort": Case(
        queues=[queue("solo", {"nominal": 100})],
        running=[job("run", "solo", 4, 22)],  # 88
        waiting=job("wait", "solo", 8, 8),
        code=ReasonCode.INSUFFICIENT_BUDGET,
        message="needs 64 GPU-hours, 12 left in cluster queue solo for h100",
        level=(BlockerLevel.CLUSTER_QUEUE, "solo"),
    ),
    "charged by the gateway's ledger": Case(
        queues=[queue("solo", {"nominal": 100})],
        running=[],
        before=lambda e: e.charge("solo", "h100", GPU_HOURS, Fraction(88)),
        waiting=job("wait", "solo", 8, 8),
        code=ReasonCode.INSUFFICIENT_BUDGET,
        message="needs 64 GPU-hours, 12 left in cluster queue solo for h100",
        level=(BlockerLevel.CLUSTER_QUEUE, "solo"),
    ),
    "charged in another queue of the cohort": Case(
        queues=[
            queue("team-a", {"nominal": 0}, cohort="research"),
            queue("team-b", {"nominal": 100}, cohort="research"),
        ],
        cohorts=["research"],
        running=[],
        before=lambda e: e.charge("team-b", "h100", GPU_HOURS, Fraction("87.5")),
        waiting=job("a-wait", "team-a", 8, 8),
        code=ReasonCode.INSUFFICIENT_BUDGET,
        message="needs 64 GPU-hours, 12.5 left in cohort research for h100",
        level=(BlockerLevel.COHORT, "research"),
    ),
    "more than the queue can ever have": Case(
        queues=[queue("solo", {"nominal": 50})],
        running=[],
        waiting=job("wait", "solo", 8, 8),
        code=ReasonCode.EXCEEDS_MAX_BUDGET,
        message="needs 64 GPU-hours, more than cluster queue solo can ever have for h100 (50)",
        level=(BlockerLevel.CLUSTER_QUEUE, "solo"),
    ),
    "more than the queue and its borrowing limit can ever have": Case(
        queues=[
            queue("team-a", {"nominal": 40, "borrowing_limit": 20}, cohort="research"),
            queue("team-b", {"nominal": 100}, cohort="research"),
        ],
        cohorts=["research"],
        running=[],
        waiting=job("a-wait", "team-a", 8, 8),
        code=ReasonCode.EXCEEDS_MAX_BUDGET,
        message="needs 64 GPU-hours, more than cluster queue team-a can ever have for h100 (60)",
        level=(BlockerLevel.CLUSTER_QUEUE, "team-a"),
    ),
    "cpu-hours are named as such": Case(
        queues=[queue("solo", {"nominal": 20}, metered="cpu")],
        running=[job("run", "solo", 1, 1, resource="cpu")],
        waiting=job("wait", "solo", 4, 5, resource="cpu"),
        code=ReasonCode.INSUFFICIENT_BUDGET,
        message="needs 20 cpu-hours, 19 left in cluster queue solo for h100",
        level=(BlockerLevel.CLUSTER_QUEUE, "solo"),
    ),
    "no max runtime and no queue default": Case(
        queues=[queue("solo", {"nominal": 100})],
        running=[],
        waiting=job("wait", "solo", 1, None),
        code=ReasonCode.MAX_RUNTIME_REQUIRED,
        message="needs a max runtime",
    ),
}


@pytest.mark.parametrize("case", REASONS.values(), ids=REASONS.keys())
def test_why_a_workload_waits_for_budget(case: Case) -> None:
    e = engine(case.queues, case.cohorts)
    for workload in case.running:
        e.add(workload)
    e.schedule()
    assert set(e.admitted) == {w.name for w in case.running}
    if case.before is not None:
        case.before(e)
    e.add(case.waiting)
    e.schedule()
    assert case.waiting.name not in e.admitted
    reason = e.reason(case.waiting.name)
    assert reason is not None
    assert reason.code is case.code, reason.message
    assert case.message in reason.message
    if case.level is not None:
        budget_blockers = [b for b in reason.blockers if b.resource.endswith("-hours")]
        assert [(b.level, b.name, b.code) for b in budget_blockers] == [(*case.level, case.code)]


def test_a_queue_default_max_runtime_lifts_max_runtime_required() -> None:
    e = engine([queue("solo", {"nominal": 100}, default_max_runtime="2h")])
    e.add(job("w", "solo", 3, None))
    assert e.schedule_once().admitted == ["w"]
    assert e.reason("w") is None
    assert _amounts(e, "solo") == ("0", "6")


def _amounts(e: QuotaEngine, level: str, resource: str = GPU_HOURS) -> tuple[str, str]:
    charged, committed = e.budgets()[level][FlavorResource("h100", resource)]
    return format_hours(charged), format_hours(committed)


def test_charge_counts_against_admission_up_to_the_last_hour() -> None:
    e = engine([queue("solo", {"nominal": 100})])
    e.charge("solo", "h100", GPU_HOURS, Fraction(36))
    e.add(job("w", "solo", 8, 8))  # 36 + 64 = 100: fits exactly
    assert e.schedule_once().admitted == ["w"]
    assert _amounts(e, "solo") == ("36", "64")
    e.charge("solo", "h100", GPU_HOURS, Fraction(1, 1000))
    e.add(job("x", "solo", 1, Fraction(1, 3600)))  # a second more than nothing
    e.schedule()
    assert "x" not in e.admitted
    assert _amounts(e, "solo") == ("36.001", "64")


def test_charge_shows_at_the_queue_and_every_cohort_above() -> None:
    e = engine(
        [
            queue("team-a", {"nominal": 10}, cohort="research"),
            queue("team-b", {"nominal": 10}, cohort="research"),
        ],
        ["research"],
    )
    e.charge("team-a", "h100", GPU_HOURS, Fraction(5, 2))
    e.charge("team-b", "h100", GPU_HOURS, Fraction(1))
    assert _amounts(e, "team-a") == ("2.5", "0")
    assert _amounts(e, "research") == ("3.5", "0")


def test_charges_restart_with_the_next_period() -> None:
    e = engine([queue("solo", {"nominal": 100})])
    e.charge("solo", "h100", GPU_HOURS, Fraction(100))
    e.add(job("w", "solo", 1, 1))
    e.schedule()
    assert "w" not in e.admitted
    e.advance_to(START + timedelta(days=29, hours=23))  # still November
    e.schedule()
    assert "w" not in e.admitted
    e.advance_to(datetime(2026, 12, 1, tzinfo=UTC))
    assert _amounts(e, "solo") == ("0", "0")
    assert e.schedule_once().admitted == ["w"]


def test_charge_refuses_what_is_not_a_budget_of_a_known_queue() -> None:
    e = engine([queue("solo", {"nominal": 100})])
    with pytest.raises(WorkloadError, match="unknown cluster queue 'ghost'"):
        e.charge("ghost", "h100", GPU_HOURS, Fraction(1))
    with pytest.raises(WorkloadError, match=r"'nvidia\.com/gpu' is not a budget resource"):
        e.charge("solo", "h100", GPU, Fraction(1))


def test_the_clock_never_goes_back() -> None:
    e = engine([queue("solo", {"nominal": 100})])
    with pytest.raises(WorkloadError, match="cannot go back"):
        e.advance_to(START - timedelta(seconds=1))
