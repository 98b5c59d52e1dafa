"""Builds the benchmarks make on first use, redone only when their source changed.

``bench.compile_engine`` (the engine through mypyc) and ``bench.huge_arenas`` (a C
extension) share the shape: a digest of the source stamped beside the build, the
compiler's output kept in a log rather than the run's, and a clear exit when it fails.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["is_current", "run_logged"]


def is_current(out: Path, digest: str, built: Callable[[], bool]) -> bool:
    """Whether ``out`` holds a finished build of the source whose digest is ``digest``."""
    stamp = out / "source.sha256"
    return stamp.exists() and stamp.read_text() == digest and built()


def run_logged(
    command: Sequence[str], out: Path, digest: str, what: str, cwd: Path | None = None
) -> None:
    """Run the build ``command`` with its output in ``out/build.log``; stamp ``out`` with
    ``digest`` when it succeeds, and exit with a pointer to the log when it does not."""
    log = out / "build.log"
    with log.open("w") as sink:
        done = subprocess.run(
            list(command), cwd=cwd, stdout=sink, stderr=subprocess.STDOUT, check=False
        )
    if done.returncode != 0:
        raise SystemExit(f"{what} failed (exit {done.returncode}); see {log}")
    (out / "source.sha256").write_text(digest)
