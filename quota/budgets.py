"""GPU-hour budgets: resources that meter a concurrent resource over time.

A budget resource is named after the resource it meters with ``-hours`` appended
(``nvidia.com/gpu-hours`` meters ``nvidia.com/gpu``) and sits in the same resource
group, so it takes the same flavor. Inside the engine a budget is just another
flavor-resource of the cohort tree, which is what makes borrowing and lending limits
mean for budgets what they mean for GPUs. Its usage at a queue is what the queue was
*charged* this period (runs that ended) plus what its admitted workloads *committed*
(their total request x the part of their max runtime inside the period): Slurm's
GrpTRESRunMins with ``safe``, so a running job never needs stopping for a budget.

Units: the tree holds budget amounts as integer milli-resource-seconds (a request
in milli-units times seconds), so sums stay exact integers like every other amount;
quotas written in resource-hours are scaled by 3600 when the tree is built.
"""

from __future__ import annotations

import dataclasses
import math
import re
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

from quota.model import ClusterQueueSpec, PodSet, ResourceQuota, Workload
from quota.periods import BudgetPeriod, period_end, period_start, seconds_between
from quota.resources import MILLI

__all__ = [
    "BUDGET_SUFFIX",
    "SECONDS_PER_HOUR",
    "DurationError",
    "budget_label",
    "budgets_of",
    "format_hours",
    "from_hours",
    "is_budget",
    "metered",
    "needs_budget",
    "overlap_seconds",
    "parse_duration",
    "runtime_of",
    "scale_quota",
    "strip_budgets",
    "to_hours",
    "use",
    "with_budgets",
]

BUDGET_SUFFIX = "-hours"
SECONDS_PER_HOUR = 3600
_UNIT = MILLI * SECONDS_PER_HOUR  # tree units in one resource-hour
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
# A year: far beyond any sane max runtime, and it keeps commitments small integers.
MAX_RUNTIME = Fraction(366 * 86400)


class DurationError(ValueError):
    """A duration that is not a positive number of seconds or ``<n>s|m|h|d``."""


def is_budget(resource: str) -> bool:
    return resource.endswith(BUDGET_SUFFIX) and len(resource) > len(BUDGET_SUFFIX)


def metered(budget: str) -> str:
    """The concurrent resource a budget resource meters."""
    return budget.removesuffix(BUDGET_SUFFIX)


def budget_label(budget: str) -> str:
    """How people say it: ``GPU-hours`` for any ``*/gpu-hours``, else the name."""
    return "GPU-hours" if metered(budget).endswith("gpu") else budget


def parse_duration(value: object) -> Fraction:
    """Seconds as a number, or a number with a suffix s, m, h or d; positive, at most
    a year."""
    if isinstance(value, bool):
        raise DurationError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        seconds = Fraction(str(value))
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if match is None:
            raise DurationError(f"{value!r} is not a duration (e.g. 90, 30m, 4h, 2d)")
        seconds = Fraction(match[1]) * _SECONDS[match[2]]
    else:
        raise DurationError(f"{value!r} is not a duration")
    if seconds <= 0:
        raise DurationError(f"{value!r} is not a positive duration")
    if seconds > MAX_RUNTIME:
        raise DurationError(f"{value!r} is longer than a year")
    return seconds


def scale_quota(resource: str, quota: ResourceQuota) -> ResourceQuota:
    """A budget quota in the tree's units (milli-resource-seconds); others unchanged."""
    if not is_budget(resource):
        return quota

    def scaled(amount: int | None) -> int | None:
        return None if amount is None else amount * SECONDS_PER_HOUR

    return ResourceQuota(
        nominal=quota.nominal * SECONDS_PER_HOUR,
        borrowing_limit=scaled(quota.borrowing_limit),
        lending_limit=scaled(quota.lending_limit),
    )


def to_hours(amount: int | Fraction) -> Fraction:
    """Tree units to resource-hours."""
    return Fraction(amount) / _UNIT


def from_hours(hours: Fraction | Decimal | int) -> int:
    """Resource-hours to tree units, rounded up (a charge is never under-counted)."""
    return math.ceil(Fraction(hours) * _UNIT)


def format_hours(amount: int | Fraction) -> str:
    """Tree units as resource-hours, half up to 1/1000 of an hour, trailing zeros
    dropped: ``"16"``, ``"2.5"``."""
    hours = to_hours(amount)
    exact = Decimal(hours.numerator) / Decimal(hours.denominator)
    text = format(exact.quantize(Decimal("0.001"), rounding=ROUND_HALF_UP), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def budgets_of(queue: ClusterQueueSpec) -> dict[str, str]:
    """Metered resource -> its budget resource, for the queue's groups that meter."""
    found = {}
    for group in queue.resource_groups:
        for resource in group.resources:
            if is_budget(resource) and metered(resource) in group.resources:
                found[metered(resource)] = resource
    return found


def needs_budget(workload: Workload, budgets: dict[str, str]) -> bool:
    return any(
        pod_set.count and pod_set.requests.get(resource, 0)
        for pod_set in workload.pod_sets
        for resource in budgets
    )


def runtime_of(workload: Workload, queue: ClusterQueueSpec) -> Fraction | None:
    return workload.max_runtime or queue.default_max_runtime


def overlap_seconds(
    start: datetime, seconds: Fraction, period: BudgetPeriod, now: datetime
) -> Fraction:
    """The part of ``[start, start + seconds)`` inside the period holding ``now``."""
    first, last = period_start(period, now), period_end(period, now)
    end = start + timedelta(seconds=float(seconds))
    if end <= first or start >= last:
        return Fraction(0)
    lo, hi = max(start, first), min(end, last)
    if lo == start and hi == end:
        return seconds  # wholly inside: exact, however fine the fraction
    return seconds_between(lo, hi)


def use(amount_milli: int, seconds: Fraction) -> int:
    """A request held for ``seconds``, in tree units, rounded up."""
    return math.ceil(amount_milli * seconds)


def with_budgets(
    workload: Workload,
    budgets: dict[str, str],
    runtime: Fraction,
    start: datetime,
    period: BudgetPeriod,
    now: datetime,
) -> Workload:
    """The workload as the tree sees it: each pod asks, besides its resources, for the
    budget its run started at ``start`` would commit in the period holding ``now``."""
    seconds = overlap_seconds(start, runtime, period, now)
    pod_sets = []
    for pod_set in strip_budgets(workload).pod_sets:
        requests = dict(pod_set.requests)
        for resource, budget in budgets.items():
            amount = pod_set.requests.get(resource, 0)
            if amount:
                requests[budget] = use(amount, seconds)
        pod_sets.append(dataclasses.replace(pod_set, requests=requests))
    return dataclasses.replace(workload, pod_sets=tuple(pod_sets), max_runtime=runtime)


def strip_budgets(workload: Workload) -> Workload:
    """The workload as it was asked for, without the budget requests of
    :func:`with_budgets`."""
    if not any(is_budget(r) for p in workload.pod_sets for r in p.requests):
        return workload
    pod_sets: list[PodSet] = [
        dataclasses.replace(p, requests={r: v for r, v in p.requests.items() if not is_budget(r)})
        for p in workload.pod_sets
    ]
    return dataclasses.replace(workload, pod_sets=tuple(pod_sets))
