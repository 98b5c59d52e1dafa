"""`ignara apply FILE` from the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "ignara.example.yaml"


def apply(path: Path, database: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{database}"}
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "apply", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_apply_twice_then_refuse_a_bad_file(tmp_path: Path) -> None:
    database = tmp_path / "ignara.db"
    first = apply(EXAMPLE, database)
    assert first.returncode == 0, first.stderr
    assert "created flavor h100" in first.stderr
    again = apply(EXAMPLE, database)
    assert again.returncode == 0 and again.stderr.strip().endswith("no changes")
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster_queues: [{name: q, cohort: 3}]\n")
    refused = apply(bad, database)
    assert refused.returncode == 2
    assert "cluster_queues[0].cohort: expected `str | null`, got `int`" in refused.stderr
    assert "Traceback" not in refused.stderr
