"""`ignara simulate FILE --json`: output schema and exit codes, as other tools rely on them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"

BORROW = """
name: cli contract
flavors: [h100]
cohorts: [{name: research}]
cluster_queues:
  - name: team-a
    cohort: research
    resource_groups:
      - resources: [nvidia.com/gpu]
        flavors: [{name: h100, quotas: {nvidia.com/gpu: {nominal: 2, borrowing_limit: 1}}}]
  - name: team-b
    cohort: research
    resource_groups:
      - resources: [nvidia.com/gpu]
        flavors: [{name: h100, quotas: {nvidia.com/gpu: {nominal: 2}}}]
workloads:
  - {name: w1, cluster_queue: team-a, created: 1,
     pod_sets: [{name: main, count: 3, requests: {nvidia.com/gpu: 1}}]}
  - {name: w2, cluster_queue: team-a, created: 2,
     pod_sets: [{name: main, count: 1, requests: {nvidia.com/gpu: 1}}]}
steps:
  - schedule: {}
  - expect:
      admitted: {w1: {main: {count: 3, flavors: {nvidia.com/gpu: h100}}}}
      pending: [%s]
"""


def simulate(path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "simulate", str(path), *flags],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_json_output_schema_and_exit_0(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(BORROW % "w2")
    done = simulate(path, "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out == {
        "snapshots": [
            {
                "admitted": {
                    "w1": {
                        "cluster_queue": "team-a",
                        "pod_sets": {"main": {"count": 3, "flavors": {"nvidia.com/gpu": "h100"}}},
                    }
                },
                "pending": ["w2"],
                "preempted": [],
                # No budget resource anywhere; the budget clock as it starts by default.
                "budgets": {},
                "clock": "2026-11-01T00:00:00Z",
            }
        ],
        "ok": True,
    }


def test_failed_expectation_exits_1_and_says_which(tmp_path: Path) -> None:
    path = tmp_path / "wrong.yaml"
    path.write_text(BORROW % "")
    done = simulate(path, "--json")
    assert done.returncode == 1
    assert json.loads(done.stdout)["ok"] is False
    assert "steps[1] (expect): pending" in done.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("flavors: [a\n", "not valid YAML"),
        ("cluster_queues: 3\n", "cluster_queues"),
        ("steps: [{fly: {}}]\n", "steps[0]"),
    ],
)
def test_invalid_file_exits_2_with_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    done = simulate(path, "--json")
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_missing_file_exits_2(tmp_path: Path) -> None:
    done = simulate(tmp_path / "absent.yaml", "--json")
    assert done.returncode == 2
    assert "cannot read the file" in done.stderr


def test_shared_example_plays_through_the_cli() -> None:
    done = simulate(SCENARIOS / "shared" / "borrow-and-reclaim.yaml", "--json")
    assert done.returncode == 0, done.stderr
    snapshots = json.loads(done.stdout)["snapshots"]
    assert snapshots[1]["preempted"] == ["a-big"]
