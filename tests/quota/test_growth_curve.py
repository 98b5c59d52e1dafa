"""``bench/growth.py``'s arithmetic: sizes parsed and refused, and a curve's cost per
n log n and step ratios, each round's ratio taken within the round."""

from __future__ import annotations

import argparse
import math

import pytest

from bench import growth


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("10000:100,100000:1000", [(10_000, 100), (100_000, 1_000)]),
        ("1:1,2:1,3:7", [(1, 1), (2, 1), (3, 7)]),
    ],
)
def test_sizes_are_parsed(text: str, parsed: list[tuple[int, int]]) -> None:
    assert growth.sizes(text) == parsed


@pytest.mark.parametrize(
    "text",
    ["10000:100", "100000:1000,10000:100", "10:1,10:2", "10:1,x:2", "10:1,20:0", "10:1,"],
)
def test_sizes_that_are_no_curve_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        growth.sizes(text)


def test_a_curve_costs_each_size_per_n_log_n_and_each_step_within_rounds() -> None:
    points = [(1_000, 10), (10_000, 100), (100_000, 1_000)]
    # Round two is slower throughout (a busy machine): within it, the ratios hold.
    cpu = [[1.0, 2.0, 1.5], [12.0, 25.0, 18.0], [150.0, 300.0, 200.0]]
    sized, steps = growth.curve(points, cpu)

    assert [s["median_cpu_s"] for s in sized] == [1.5, 18.0, 200.0]
    assert sized[0]["ns_per_n_log_n"] == round(1.5 / (1_000 * math.log(1_000)) * 1e9, 1)
    assert sized[2]["cpu_s"] == [150.0, 300.0, 200.0]
    assert [(s["from"], s["to"]) for s in steps] == [
        ("1000:10", "10000:100"),
        ("10000:100", "100000:1000"),
    ]
    assert steps[0]["ratios"] == [12.0, 12.5, 12.0]
    assert steps[0]["median_ratio"] == 12.0
    assert steps[1]["ratios"] == [12.5, 12.0, 11.11]
    assert steps[1]["median_ratio"] == 12.0
    assert steps[0]["n_log_n"] == round(growth.n_log_n(1_000, 10_000), 2) == 13.33
