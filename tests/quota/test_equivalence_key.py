"""The equivalence key is one flat tuple (so the garbage collector untracks it): it
must still tell apart every two workloads that could fare differently. A tenant
shaping its workloads to collide with another shape would otherwise have them set
aside, or handed out, with a class they do not belong to."""

from __future__ import annotations

import gc

import pytest

from quota.model import PodSet, Workload
from quota.queues import equivalence_key


def _workload(*pod_sets: PodSet, priority: int = 0) -> Workload:
    return Workload("w", "q", pod_sets, priority)


# Pairs a naive flattening (no counts of requests, no pod-set boundaries) would merge.
DIFFERENT = [
    (
        "one pod set of two requests, or two of one",
        _workload(PodSet("a", 1, {"cpu": 1, "gpu": 2})),
        _workload(PodSet("a", 1, {"cpu": 1}), PodSet("b", 1, {"gpu": 2})),
    ),
    (
        "a resource named like a number",
        _workload(PodSet("a", 1, {"1": 2})),
        _workload(PodSet("a", 1, {}), PodSet("b", 1, {})),
    ),
    (
        "min count or none",
        _workload(PodSet("a", 2, {"cpu": 1}, min_count=1)),
        _workload(PodSet("a", 2, {"cpu": 1})),
    ),
    (
        "priority",
        _workload(PodSet("a", 1, {"cpu": 1}), priority=1),
        _workload(PodSet("a", 1, {"cpu": 1})),
    ),
    ("amount", _workload(PodSet("a", 1, {"cpu": 2})), _workload(PodSet("a", 1, {"cpu": 1}))),
]


@pytest.mark.parametrize(
    ("first", "second"), [c[1:] for c in DIFFERENT], ids=[c[0] for c in DIFFERENT]
)
def test_workloads_that_may_fare_differently_have_different_keys(
    first: Workload, second: Workload
) -> None:
    assert equivalence_key(first) != equivalence_key(second)


def test_names_and_request_order_do_not_matter_and_the_key_is_untracked() -> None:
    first = Workload("x", "q", (PodSet("a", 2, {"cpu": 1, "gpu": 2}),), 3)
    second = Workload("y", "q", (PodSet("b", 2, {"gpu": 2, "cpu": 1}),), 3)
    key = equivalence_key(first)
    assert key == equivalence_key(second)
    gc.collect()
    assert not gc.is_tracked(key)
