"""The engine built with mypyc (``bench/compile_engine.py``, what ``make replay`` runs)
decides exactly what the Python modules decide: the same replays, summary for
summary, and the same admission benchmark, cycle for cycle. Each side runs in its
own process; the compiled one is checked to have loaded the extension modules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import compile_engine
from tests.support.python_runs import run_python

FIXTURES = Path(__file__).parent / "replay_fixtures"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_engine.build(tmp_path_factory.mktemp("mypyc"))


def run(args: list[str], compiled: Path | None) -> str:
    return run_python(args, [] if compiled is None else [compiled])


def test_the_build_is_kept_until_the_source_changes(compiled: Path) -> None:
    extensions = sorted(p.name.split(".")[0] for p in (compiled / "quota").glob("*.so"))
    assert "scheduler" in extensions and "tree" in extensions
    assert "config" not in extensions  # decoded documents stay Python classes
    stamp = (compiled.parent / "source.sha256").stat().st_mtime_ns
    assert compile_engine.build(compiled.parent) == compiled
    assert (compiled.parent / "source.sha256").stat().st_mtime_ns == stamp


@pytest.mark.parametrize("policy", ["static", "cohort", "cohort-fair"])
def test_a_compiled_replay_is_the_python_replay(
    compiled: Path, tmp_path: Path, policy: str
) -> None:
    quotas = tmp_path / "quotas"
    run(
        ["-m", "gateway.cli", "replay-quotas", str(FIXTURES / "philly_vc_nodes.csv"),
         "--out", str(quotas)],
        None,
    )  # fmt: skip
    args = [
        "-m", "gateway.cli", "replay", str(FIXTURES / "philly_sample.csv"),
        "--quota", str(quotas / f"{policy}.yaml"), "--policy", policy,
        "--capacity-scale", "0.05", "--json",
    ]  # fmt: skip
    python, native = json.loads(run(args, None)), json.loads(run(args, compiled))
    assert python["run"].pop("engine") == "python"
    assert native["run"].pop("engine") == "compiled"
    for summary in (python, native):
        for timing in ("wall_seconds", "cpu_seconds", "peak_rss_mb"):
            summary["run"].pop(timing)
    assert python["run"]["cycles"] > 100 and python["completed"] > 0
    if policy != "static":
        assert python["preempted_jobs"] > 0  # the preemption searches were exercised
    assert native == python


def test_the_compiled_admission_benchmark_decides_the_same(compiled: Path) -> None:
    args = ["bench/admission.py", "--workloads", "600", "--queues", "20", "--preemption"]
    decisions = ("cycles", "admitted", "admitted_final", "preempted")
    python, native = (json.loads(run(args, c).splitlines()[-1]) for c in (None, compiled))
    assert python["preempted"] > 0
    assert [native[k] for k in decisions] == [python[k] for k in decisions]
