"""What a replay did, in numbers: the JSON summary the report and the table read.

Definitions (seconds unless named otherwise):

- queueing delay: a job's total time pending, before its first run and after
  each eviction, for jobs that completed; JCT: completion minus submit.
- percentiles are nearest-rank (p50 of 1..4 is 2).
- utilization: GPUs held over the sum of nominal quotas, time-weighted over
  the arrival window (first to last submit), where the trace has load.
- starvation: the longest wait of jobs of 32 GPUs or more, counting jobs that
  never started with what they had waited when the replay ended.
- reclaim latency: when a team asks for GPUs within its nominal quota and the
  cluster has no free room for them (its lent quota must come back), how long
  until it gets them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from quota.replay.simulation import JobRecord, ReclaimSample, ReplayResult, UsageSample

__all__ = [
    "BIG_GANG_GPUS",
    "LONG_WAIT",
    "bucketed",
    "distribution",
    "percentile",
    "step_mean",
    "summarize",
    "waited",
]

LONG_WAIT = 3600.0
BIG_GANG_GPUS = 32


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of already sorted ``values`` (``q`` in 0..100)."""
    if not values:
        return None
    rank = max(1, math.ceil(q / 100 * len(values)))
    return values[rank - 1]


def distribution(values: Iterable[float]) -> dict[str, float | int | None]:
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "mean": sum(ordered) / len(ordered) if ordered else None,
        "p50": percentile(ordered, 50),
        "p95": percentile(ordered, 95),
        "p99": percentile(ordered, 99),
        "max": ordered[-1] if ordered else None,
    }


def step_mean(samples: Sequence[UsageSample], start: float, stop: float) -> tuple[float, float]:
    """Time-weighted mean of (used, borrowed) GPUs over ``[start, stop)``: each sample
    holds until the next; before the first, nothing is held."""
    if stop <= start:
        return (0.0, 0.0)
    used = borrowed = 0.0
    for i, sample in enumerate(samples):
        until = samples[i + 1].at if i + 1 < len(samples) else math.inf
        overlap = min(until, stop) - max(sample.at, start)
        if overlap > 0:
            used += sample.used * overlap
            borrowed += sample.borrowed * overlap
    span = stop - start
    return (used / span, borrowed / span)


def bucketed(
    samples: Sequence[UsageSample], start: float, stop: float, buckets: int
) -> list[tuple[float, float, float]]:
    """(bucket start, mean used, mean borrowed) for ``buckets`` equal slices of
    ``[start, stop)``; one pass over the samples."""
    if stop <= start or buckets < 1:
        return []
    width = (stop - start) / buckets
    used = [0.0] * buckets
    borrowed = [0.0] * buckets
    for i, sample in enumerate(samples):
        lo = max(sample.at, start)
        hi = min(samples[i + 1].at if i + 1 < len(samples) else stop, stop)
        while lo < hi:
            b = min(int((lo - start) / width), buckets - 1)
            if b < buckets - 1 and start + (b + 1) * width <= lo:
                b += 1  # float rounding put lo just under its bucket's start
            edge = hi if b == buckets - 1 else min(hi, start + (b + 1) * width)
            used[b] += sample.used * (edge - lo)
            borrowed[b] += sample.borrowed * (edge - lo)
            lo = edge
    return [(start + b * width, used[b] / width, borrowed[b] / width) for b in range(buckets)]


def waited(record: JobRecord, end: float) -> float:
    """Time pending so far: a job still pending at ``end`` has waited until then."""
    return record.wait + (end - record.pending_since if record.pending_since is not None else 0.0)


def _reclaim(samples: Sequence[ReclaimSample]) -> dict[str, Any]:
    needed = [s for s in samples if s.needed]
    granted = [s.granted - s.asked for s in needed if s.granted is not None]
    return {
        "asked": len(samples),
        "needed_reclaim": len(needed),
        "never_granted": sum(1 for s in needed if s.granted is None),
        "latency_s": distribution(granted),
    }


def _jobs(records: Sequence[JobRecord], end: float) -> dict[str, Any]:
    done = [r for r in records if r.completed]
    big = [r for r in records if r.gpus >= BIG_GANG_GPUS]
    big_never = [r for r in big if r.first_start is None]
    delays = [r.wait for r in done]
    return {
        "jobs": len(records),
        "completed": len(done),
        "never_started": sum(1 for r in records if r.first_start is None),
        "unfinished": sum(1 for r in records if not r.completed),
        "queueing_delay_s": distribution(delays),
        "jct_s": distribution(r.end - r.submit for r in done if r.end is not None),
        "waited_over_1h": (sum(1 for d in delays if d > LONG_WAIT) / len(delays))
        if delays
        else None,
        "big_gangs": {
            "jobs": len(big),
            "never_started": len(big_never),
            "longest_wait_s": max((waited(r, end) for r in big), default=None),
        },
        "preempted_jobs": sum(1 for r in records if r.runs > 1 or r.lost_gpu_seconds > 0),
        "gpu_hours_lost": sum(r.lost_gpu_seconds for r in records) / 3600,
        "gpu_hours_done": sum(r.duration * r.gpus for r in done) / 3600,
    }


def summarize(result: ReplayResult, *, buckets: int = 400) -> dict[str, Any]:
    """The JSON summary of a replay, per team too, with the utilization series."""
    used, borrowed = step_mean(result.usage, 0.0, result.last_arrival)
    overall = _jobs(result.jobs, result.end)
    teams: dict[str, Any] = {}
    for team in sorted(result.nominal):
        records = [r for r in result.jobs if r.team == team]
        samples = [s for s in result.reclaims if s.team == team]
        teams[team] = {
            "nominal_gpus": result.nominal[team],
            **_jobs(records, result.end),
            "reclaim": _reclaim(samples),
        }
    never = [r for r in result.jobs if r.first_start is None]
    reasons: dict[str, int] = {}
    for record in never:
        reasons[record.reason or "unknown"] = reasons.get(record.reason or "unknown", 0) + 1
    capacity = result.capacity or 1
    series = bucketed(result.usage, 0.0, max(result.end, result.last_arrival), buckets)
    return {
        "policy": result.policy,
        "capacity_gpus": result.capacity,
        "origin": result.origin.isoformat(),
        "arrival_window": {
            "from": result.origin.isoformat(),
            "to": (result.origin + timedelta(seconds=result.last_arrival)).isoformat(),
        },
        "simulated_until": (result.origin + timedelta(seconds=result.end)).isoformat(),
        "truncated": result.truncated,
        "dropped_jobs": dict(sorted(result.dropped.items())),
        "utilization": {
            "mean": used / capacity,
            "mean_gpus": used,
            "borrowed_mean_gpus": borrowed,
        },
        **overall,
        "never_started_reasons": dict(sorted(reasons.items())),
        "reclaim": _reclaim(result.reclaims),
        "teams": teams,
        "run": {
            "wall_seconds": result.wall_seconds,
            "cpu_seconds": result.cpu_seconds,
            "peak_rss_mb": result.peak_rss_mb,
            "cycles": result.cycles,
            "admissions": result.admissions,
            "preemptions": result.preemptions,
        },
        "series": {
            "bucket_seconds": (series[1][0] - series[0][0]) if len(series) > 1 else None,
            "start": [round(s[0], 3) for s in series],
            "used_gpus": [round(s[1], 3) for s in series],
            "borrowed_gpus": [round(s[2], 3) for s in series],
        },
    }
