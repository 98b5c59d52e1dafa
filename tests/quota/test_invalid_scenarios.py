"""Files that are not valid scenarios are refused with a message naming the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from quota.errors import ScenarioError
from quota.scenario import parse_scenario
from quota.simulate import play

BASE: dict[str, Any] = {
    "name": "base",
    "flavors": ["h100"],
    "cluster_queues": [
        {
            "name": "team-a",
            "resource_groups": [
                {
                    "resources": ["nvidia.com/gpu", "cpu"],
                    "flavors": [{"name": "h100", "quotas": {"nvidia.com/gpu": {"nominal": 8}}}],
                }
            ],
        }
    ],
    "workloads": [
        {
            "name": "w1",
            "cluster_queue": "team-a",
            "pod_sets": [{"name": "main", "count": 2, "requests": {"nvidia.com/gpu": 1}}],
        },
        {
            "name": "big",
            "cluster_queue": "team-a",
            "pod_sets": [{"name": "main", "count": 20, "requests": {"nvidia.com/gpu": 1}}],
        },
    ],
    "steps": [{"schedule": {}}, {"expect": {"pending": ["big"]}}],
}


def _with(change: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    change(doc)
    return doc


def _group(doc: dict[str, Any]) -> dict[str, Any]:
    group: dict[str, Any] = doc["cluster_queues"][0]["resource_groups"][0]
    return group


CASES = {
    "unknown flavor": (
        lambda d: _group(d)["flavors"].append({"name": "a100", "quotas": {}}),
        "cluster_queues[0].resource_groups[0].flavors[1].name: unknown flavor 'a100'",
    ),
    "resource in two groups": (
        lambda d: d["cluster_queues"][0]["resource_groups"].append(
            {"resources": ["cpu"], "flavors": [{"name": "h100", "quotas": {"cpu": {"nominal": 1}}}]}
        ),
        "resource_groups[1].resources: 'cpu' is already in resource_groups[0]",
    ),
    "negative quota": (
        lambda d: _group(d)["flavors"][0]["quotas"]["nvidia.com/gpu"].update(nominal=-1),
        "quotas['nvidia.com/gpu'].nominal: -1 is negative",
    ),
    "negative request": (
        lambda d: d["workloads"][0]["pod_sets"][0]["requests"].update({"cpu": "-500m"}),
        "workloads[0].pod_sets[0].requests['cpu']: '-500m' is negative",
    ),
    "bad quantity string": (
        lambda d: _group(d)["flavors"][0]["quotas"]["nvidia.com/gpu"].update(nominal="8 GPUs"),
        "nominal: '8 GPUs' is not a quantity",
    ),
    "unknown step": (
        lambda d: d["steps"].append({"teleport": ["w1"]}),
        "steps[2]: object contains unknown field `teleport`",
    ),
    "two verbs in one step": (
        lambda d: d["steps"].append({"finish": ["w1"], "delete": ["w1"]}),
        "steps[2]: a step is exactly one of",
    ),
    "finish of an unknown workload": (
        lambda d: d["steps"].append({"finish": ["ghost"]}),
        "steps[2].finish[0]: unknown workload 'ghost'",
    ),
    "unknown cluster queue": (
        lambda d: d["workloads"][0].update(cluster_queue="team-z"),
        "workloads[0].cluster_queue: unknown cluster queue 'team-z'",
    ),
    "duplicate workload": (
        lambda d: d["workloads"].append(copy.deepcopy(d["workloads"][0])),
        "workloads[2].name: workload 'w1' is declared twice",
    ),
    "unknown field": (
        lambda d: d["cluster_queues"][0].update(colour="blue"),
        "cluster_queues[0]: object contains unknown field `colour`",
    ),
    "wrong type": (
        lambda d: d["workloads"][0]["pod_sets"][0].update(count="two"),
        "workloads[0].pod_sets[0].count: expected `int`, got `str`",
    ),
    "min_count above count": (
        lambda d: d["workloads"][0]["pod_sets"][0].update(min_count=5),
        "workloads[0].pod_sets[0].min_count: must be between 0 and count (2)",
    ),
    "bad queueing strategy": (
        lambda d: d["cluster_queues"][0].update(queueing_strategy="Random"),
        "cluster_queues[0].queueing_strategy: invalid enum value 'Random'",
    ),
    "cohort cycle": (
        lambda d: d.update(cohorts=[{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}]),
        "is its own ancestor",
    ),
    "admitted with unknown pod set": (
        lambda d: d["workloads"][0].update(admitted={"other": {"count": 1}}),
        "workloads[0].admitted['other']: the workload has no pod set 'other'",
    ),
}


@pytest.mark.parametrize("change,message", CASES.values(), ids=CASES.keys())
def test_invalid_scenario_names_the_field(change: Any, message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(_with(change))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_base_document_is_valid() -> None:
    assert play(parse_scenario(BASE)).ok


def test_finish_of_a_pending_workload_is_refused_while_playing() -> None:
    doc = _with(lambda d: d["steps"].append({"finish": ["big"]}))
    scenario = parse_scenario(doc)  # valid as a file: `big` exists
    with pytest.raises(
        ScenarioError, match=r"steps\[2\]\.finish\[0\]: workload 'big' is not admitted"
    ):
        play(scenario)


def test_top_level_must_be_a_mapping() -> None:
    with pytest.raises(ScenarioError, match="top level"):
        parse_scenario(["flavors"])
