"""When would pending workloads start? Play the engine forward on the budget clock.

Assumptions, said in every answer built from this: every admitted workload runs to
its max runtime (from when it was admitted) and then ends; nothing new is submitted
and nothing is cancelled; quotas do not change. So an estimate is a bound under
those assumptions, not a promise: work that ends early makes it earlier, new
higher-priority work later.

Steps, repeated until every pending workload has a start or the horizon is reached:
  1. schedule until quiet at the current time; each workload admitted for the first
     time starts now;
  2. find the earliest end among admitted workloads (or the next budget period,
     when only a budget keeps work waiting);
  3. move the clock there and end every workload due by then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from quota.cache import AdmittedWorkload
from quota.engine import QuotaEngine
from quota.periods import period_end

__all__ = ["ASSUMPTIONS", "Forecast", "forecast"]

ASSUMPTIONS = (
    "an estimate, not a promise: it assumes every admitted workload runs to its max"
    " runtime, nothing new is submitted or cancelled, and quotas do not change"
)
DEFAULT_HORIZON = timedelta(days=62)  # past that, "not within the horizon"
MAX_STEPS = 10_000


@dataclass
class Forecast:
    """Start times by workload name (``None``: not within the horizon), and who was
    preempted, by whom, along the way."""

    starts: dict[str, datetime | None] = field(default_factory=dict)
    preempted_by: dict[str, list[str]] = field(default_factory=dict)
    horizon: datetime | None = None


def forecast(
    engine: QuotaEngine, *, horizon: timedelta = DEFAULT_HORIZON, max_steps: int = MAX_STEPS
) -> Forecast:
    """Play ``engine`` forward (it is consumed: build one for the purpose)."""
    limit = engine.now + horizon
    result = Forecast(horizon=limit)
    waiting = {w.name for w in engine.pending()}
    result.starts = dict.fromkeys(waiting)
    ends = {name: _end(record, engine.now) for name, record in engine.admitted.items()}
    for _ in range(max_steps):
        # 1.
        for cycle in engine.cycles():
            for record in cycle.admitted_records:
                if record.name in waiting:
                    waiting.discard(record.name)
                    result.starts[record.name] = engine.now
                ends[record.name] = _end(record, engine.now)
            for name, preemption in cycle.preemptions.items():
                result.preempted_by.setdefault(preemption.preemptor, []).append(name)
                ends.pop(name, None)
        if not waiting:
            break
        # 2.
        upcoming = min(ends.values(), default=None)
        roll = period_end(engine.config.budget_period, engine.now)
        step = roll if upcoming is None else min(upcoming, roll)
        if step > limit or (upcoming is None and not _has_budgets(engine)):
            break
        # 3.
        engine.advance_to(step)
        for name in [n for n, end in ends.items() if end <= step]:
            del ends[name]
            engine.finish(name)
    return result


def _end(record: AdmittedWorkload, now: datetime) -> datetime:
    runtime = record.workload.max_runtime
    began = record.started or now
    if runtime is None:  # runs until told otherwise: it never frees its quota here
        return datetime.max.replace(tzinfo=now.tzinfo)
    return max(began + timedelta(seconds=float(runtime)), now)


def _has_budgets(engine: QuotaEngine) -> bool:
    return any(queue.budgets for queue in engine.state.queues.values())
