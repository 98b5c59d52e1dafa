"""Python run in a process of its own from the repository's root, as the benchmark
tests run ``bench`` and the engine: ``-P`` so that nothing comes before ``PYTHONPATH``
(``-m`` would put the working directory first)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ROOT", "run_python"]

ROOT = Path(__file__).resolve().parents[2]


def run_python(args: Sequence[str], paths: Sequence[Path] = ()) -> str:
    """Its standard output; the run must succeed. ``paths`` go before the root on
    ``PYTHONPATH``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, [*paths, ROOT]))}
    done = subprocess.run(
        [sys.executable, "-P", *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout
