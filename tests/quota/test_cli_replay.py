"""`ignara replay` and `ignara replay-quotas` on the committed fixture trace."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from gateway.cli import main

FIXTURES = Path(__file__).parent / "replay_fixtures"
TRACE = str(FIXTURES / "philly_sample.csv")


def quotas(tmp_path: Path) -> Path:
    out = tmp_path / "quotas"
    result = CliRunner().invoke(
        main, ["replay-quotas", str(FIXTURES / "philly_vc_nodes.csv"), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "cohort-fair.yaml",
        "cohort.yaml",
        "static.yaml",
    ]
    return out


def test_replay_writes_the_summary_and_the_report(tmp_path: Path) -> None:
    files = quotas(tmp_path)
    out = tmp_path / "run"
    result = CliRunner().invoke(
        main,
        [
            "replay", TRACE, "--quota", str(files / "cohort.yaml"), "--policy", "cohort",
            "--capacity-scale", "0.05", "--from", "2017-10-16", "--to", "2017-10-16",
            "--out", str(out),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "| cohort x0.05 |" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy"] == "cohort"
    assert summary["jobs"] == 310  # the whole day, --to included
    assert summary["capacity_gpus"] == 141  # 2,816 GPUs x 0.05, queue by queue
    assert summary["inputs"]["capacity_scale"] == 0.05
    assert (out / "report.html").read_text().startswith("<!doctype html>")


def test_replay_window_and_limit_choose_the_jobs(tmp_path: Path) -> None:
    files = quotas(tmp_path)
    base = ["replay", TRACE, "--quota", str(files / "static.yaml"), "--policy", "static"]
    result = CliRunner().invoke(main, [*base, "--limit", "20", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["jobs"] == 20
    result = CliRunner().invoke(main, [*base, "--from", "2017-10-16T04:00", "--json"])
    assert json.loads(result.stdout)["jobs"] < 310
    result = CliRunner().invoke(main, [*base, "--from", "2018-01-01"])
    assert result.exit_code == 2
    assert "no job of the trace is in the window" in result.stderr


def test_replay_refuses_a_quota_file_of_another_policy(tmp_path: Path) -> None:
    files = quotas(tmp_path)
    result = CliRunner().invoke(
        main, ["replay", TRACE, "--quota", str(files / "cohort.yaml"), "--policy", "static"]
    )
    assert result.exit_code == 2
    assert "is a 'cohort' configuration, not 'static'" in result.stderr


def test_replay_refuses_unreadable_input(tmp_path: Path) -> None:
    files = quotas(tmp_path)
    static = str(files / "static.yaml")
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01,-5,1,1,a\n")
    for args in (
        [str(bad), "--quota", str(files / "static.yaml")],
        [str(tmp_path / "missing.csv"), "--quota", str(files / "static.yaml")],
        [TRACE, "--quota", str(tmp_path / "missing.yaml")],
        [TRACE, "--quota", str(files / "static.yaml"), "--capacity-scale", "-1"],
        [TRACE, "--quota", static, "--from", "2017-10-02", "--to", "2017-10-01"],
    ):
        result = CliRunner().invoke(main, ["replay", *args, "--policy", "static"])
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.startswith("cannot replay:"), result.stderr
