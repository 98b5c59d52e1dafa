"""The supervisor of one local job: ``python -I -S _runner.py DIR WORK -- COMMAND...``.

Why a supervisor: only a process's parent can learn its exit status. The gateway may restart
while a job runs, and the new gateway process is not the job's parent; this small process is,
and it writes the status to ``DIR/exit.json`` where any gateway process can read it.

It is started as a session (and process-group) leader by ``LocalBackend``, with its stdout and
stderr already pointing at the job's log and the job's environment as its own. It runs the
command with the working directory ``WORK`` and no shell, waits for it, records
``{"exit_code", "error", "finished_at"}``, then SIGKILLs its own process group so nothing the
job left behind in the background outlives it (this ends the supervisor too; the record is
already written). On SIGTERM (``LocalBackend`` signals the whole group) it keeps waiting, so
the job's own exit status is what gets recorded.

Standard library only, and run with ``-I -S``: it must not import the gateway, nor be
influenced by the job's ``PYTHON*`` variables, which it passes on to the job untouched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

__all__ = ["EXIT_RECORD", "main"]

EXIT_RECORD = "exit.json"
_NOT_FOUND = 127
_NOT_EXECUTABLE = 126


class _StopFlag:
    """Remembers a SIGTERM that arrived before the job's process existed."""

    def __init__(self) -> None:
        self.requested = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        # A Python handler, not SIG_IGN: ignored signals stay ignored across exec, handlers
        # are reset, so the job still gets the default SIGTERM behaviour.
        self.requested = True


def _write_record(job_dir: Path, exit_code: int | None, error: str | None) -> None:
    record = {
        "exit_code": exit_code,
        "error": error,
        "finished_at": datetime.now(UTC).isoformat(),
    }
    tmp = job_dir / f".{EXIT_RECORD}.{os.getpid()}.tmp"
    with tmp.open("w", encoding="utf-8") as out:
        json.dump(record, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, job_dir / EXIT_RECORD)


def _run(command: list[str], work: Path, stop: _StopFlag) -> tuple[int | None, str | None]:
    program = command[0]
    try:
        child = subprocess.Popen(command, cwd=work)
    except FileNotFoundError:
        return _NOT_FOUND, f"command not found: {program!r}"
    except PermissionError:
        return _NOT_EXECUTABLE, f"command not executable: {program!r}"
    except OSError as exc:
        return _NOT_EXECUTABLE, f"could not run {program!r}: {exc.strerror or exc}"
    if stop.requested:
        # The group's SIGTERM came before the child existed, so the child never saw it.
        child.terminate()
    return child.wait(), None


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        print("usage: _runner.py DIR WORK -- COMMAND...", file=sys.stderr)
        return 2
    job_dir, work, command = Path(argv[1]), Path(argv[2]), argv[4:]
    stop = _StopFlag()
    signal.signal(signal.SIGTERM, stop.handle)
    exit_code: int | None = None
    error: str | None = "cancelled before the command started"
    if not stop.requested:
        exit_code, error = _run(command, work, stop)
    if error is not None:
        print(f"ignara: {error}", file=sys.stderr, flush=True)
    _write_record(job_dir, exit_code, error)
    sys.stdout.flush()
    sys.stderr.flush()
    # Only when this process leads its own group: otherwise the group is someone else's.
    if os.getpgrp() == os.getpid():
        os.killpg(0, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
