"""Partial admission (Kueue's ``podset_reducer.go``, default proportional policy):
the smallest cut in pods that lets a workload with ``min_count`` pod sets fit
or preempt.

A cut of ``k`` out of the total slack ``T`` (the sum of ``count - min_count``)
takes ``floor(slack_i * k / T)`` pods from each pod set; a binary search finds
the smallest ``k`` that works.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from quota.model import Workload

__all__ = ["can_be_partially_admitted", "search"]

R = TypeVar("R")


def can_be_partially_admitted(workload: Workload) -> bool:
    return any(p.min_count is not None and p.min_count < p.count for p in workload.pod_sets)


def search(workload: Workload, fits: Callable[[list[int]], R | None]) -> R | None:
    """The result of ``fits`` for the largest proportional counts that work, or ``None``."""
    full = [p.count for p in workload.pod_sets]
    slack = [
        p.count - (p.min_count if p.min_count is not None else p.count) for p in workload.pod_sets
    ]
    total = sum(slack)
    if total <= 0:
        return None
    lo, hi = 0, total + 1
    best: R | None = None
    while lo < hi:
        cut = (lo + hi) // 2
        found = fits([f - s * cut // total for f, s in zip(full, slack, strict=True)])
        if found is not None:
            best, hi = found, cut
        else:
            lo = cut + 1
    return best
