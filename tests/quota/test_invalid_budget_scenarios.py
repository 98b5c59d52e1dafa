"""Scenario files whose budget parts are invalid are refused (``ignara simulate``
exits 2) with a one-line message naming the field."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from quota.errors import ScenarioError
from quota.scenario import parse_scenario
from quota.simulate import play

GPU, GPU_HOURS = "nvidia.com/gpu", "nvidia.com/gpu-hours"

BASE: dict[str, Any] = {
    "name": "budget base",
    "clock": "2026-11-01T00:00:00Z",
    "budget_period": "month",
    "flavors": ["h100", "a100"],
    "cluster_queues": [
        {
            "name": "team-a",
            "default_max_runtime": "4h",
            "resource_groups": [
                {
                    "resources": [GPU, GPU_HOURS],
                    "flavors": [
                        {
                            "name": "h100",
                            "quotas": {GPU: {"nominal": 8}, GPU_HOURS: {"nominal": 100}},
                        },
                        {
                            "name": "a100",
                            "quotas": {GPU: {"nominal": 8}, GPU_HOURS: {"nominal": 10}},
                        },
                    ],
                }
            ],
        }
    ],
    "workloads": [
        {
            "name": "w1",
            "cluster_queue": "team-a",
            "max_runtime": "10h",
            "pod_sets": [{"name": "main", "count": 2, "requests": {GPU: 4}}],
        }
    ],
    "steps": [
        {"schedule": {}},
        {"advance": "2h"},
        {"finish": ["w1"]},
        {"expect": {"budgets": {"team-a": {"h100": {GPU_HOURS: {"charged": "16"}}}}}},
    ],
}


def _with(change: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    change(doc)
    return doc


def _queue(doc: dict[str, Any]) -> dict[str, Any]:
    queue: dict[str, Any] = doc["cluster_queues"][0]
    return queue


def _group(doc: dict[str, Any]) -> dict[str, Any]:
    group: dict[str, Any] = _queue(doc)["resource_groups"][0]
    return group


def _split_groups(doc: dict[str, Any]) -> None:
    """The budget resource in a group of its own, away from the GPUs it meters."""
    _queue(doc)["resource_groups"] = [
        {"resources": [GPU], "flavors": [{"name": "h100", "quotas": {GPU: {"nominal": 8}}}]},
        {
            "resources": [GPU_HOURS],
            "flavors": [{"name": "a100", "quotas": {GPU_HOURS: {"nominal": 100}}}],
        },
    ]


CASES = {
    "budget resource without its metered resource in the group": (
        _split_groups,
        "cluster_queues[0].resource_groups[1].resources: budget resource 'nvidia.com/gpu-hours'",
    ),
    "budget resource without its metered resource, at a cohort": (
        lambda d: d.update(
            cohorts=[
                {
                    "name": "research",
                    "resource_groups": [
                        {
                            "resources": ["cpu-hours"],
                            "flavors": [{"name": "h100", "quotas": {"cpu-hours": {"nominal": 1}}}],
                        }
                    ],
                }
            ]
        ),
        "cohorts[0].resource_groups[0].resources: budget resource 'cpu-hours'",
    ),
    "a flavor with no quota for the budget resource": (
        lambda d: _group(d)["flavors"][1]["quotas"].pop(GPU_HOURS),
        "cluster_queues[0].resource_groups[0].flavors[1].quotas: no quota for budget resource"
        " 'nvidia.com/gpu-hours'",
    ),
    "zero max runtime": (
        lambda d: d["workloads"][0].update(max_runtime=0),
        "workloads[0].max_runtime: 0 is not a positive duration",
    ),
    "zero max runtime with a suffix": (
        lambda d: d["workloads"][0].update(max_runtime="0h"),
        "workloads[0].max_runtime: '0h' is not a positive duration",
    ),
    "negative max runtime": (
        lambda d: d["workloads"][0].update(max_runtime=-5),
        "workloads[0].max_runtime: -5 is not",
    ),
    "negative max runtime with a suffix": (
        lambda d: d["workloads"][0].update(max_runtime="-1h"),
        "workloads[0].max_runtime: '-1h' is not a duration",
    ),
    "unknown duration unit": (
        lambda d: d["workloads"][0].update(max_runtime="4x"),
        "workloads[0].max_runtime: '4x' is not a duration",
    ),
    "max runtime longer than a year": (
        lambda d: d["workloads"][0].update(max_runtime="367d"),
        "workloads[0].max_runtime: '367d' is longer than a year",
    ),
    "bad default max runtime": (
        lambda d: _queue(d).update(default_max_runtime="4x"),
        "cluster_queues[0].default_max_runtime: '4x' is not a duration",
    ),
    "zero default max runtime": (
        lambda d: _queue(d).update(default_max_runtime="0s"),
        "cluster_queues[0].default_max_runtime: '0s' is not a positive duration",
    ),
    "bad max runtime of a submitted workload": (
        lambda d: d["steps"].insert(
            0,
            {
                "submit": [
                    {
                        "name": "w2",
                        "cluster_queue": "team-a",
                        "max_runtime": "ten hours",
                        "pod_sets": [{"name": "main", "count": 1, "requests": {GPU: 1}}],
                    }
                ]
            },
        ),
        "steps[0].submit[0].max_runtime: 'ten hours' is not a duration",
    ),
    "zero advance": (
        lambda d: d["steps"].__setitem__(1, {"advance": 0}),
        "steps[1].advance: 0 is not a positive duration",
    ),
    "negative advance": (
        lambda d: d["steps"].__setitem__(1, {"advance": "-2h"}),
        "steps[1].advance: '-2h' is not a duration",
    ),
    "advance longer than a year": (
        lambda d: d["steps"].__setitem__(1, {"advance": "400d"}),
        "steps[1].advance: '400d' is longer than a year",
    ),
    "advance with an unknown unit": (
        lambda d: d["steps"].__setitem__(1, {"advance": "2w"}),
        "steps[1].advance: '2w' is not a duration",
    ),
    "clock with no time zone": (
        lambda d: d.update(clock="2026-11-01T00:00:00"),
        "clock: '2026-11-01T00:00:00' names no time zone",
    ),
    "clock that is not a time": (
        lambda d: d.update(clock="next tuesday"),
        "clock: 'next tuesday' is not an ISO 8601 time",
    ),
    "requesting a budget resource directly": (
        lambda d: d["workloads"][0]["pod_sets"][0]["requests"].update({GPU_HOURS: 10}),
        "workloads[0].pod_sets[0].requests['nvidia.com/gpu-hours']: a budget is committed",
    ),
    "unknown budget period": (
        lambda d: d.update(budget_period="fortnight"),
        "budget_period: invalid enum value 'fortnight'",
    ),
}


@pytest.mark.parametrize("change,message", CASES.values(), ids=CASES.keys())
def test_invalid_budget_scenario_names_the_field(change: Any, message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(_with(change))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_base_document_is_valid_and_plays() -> None:
    assert play(parse_scenario(BASE)).ok


@pytest.mark.parametrize(
    "case",
    ["a flavor with no quota for the budget resource", "clock with no time zone"],
)
def test_the_cli_exits_2_naming_the_field(tmp_path: Path, case: str) -> None:
    change, message = CASES[case]
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(_with(change)), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "simulate", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert done.stdout == ""
