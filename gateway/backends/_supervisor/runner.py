"""The supervisor's main: read the plan, run the job, record ``exit.json``.

Why a supervisor: only a process's parent can learn its exit status. The gateway may restart
while a job runs, and the new gateway process is not the job's parent; this small process
is (of the sandbox's reaper, which reports the job's status), and it writes the status to
``JOB_DIR/exit.json`` where any gateway process can read it.

``LocalBackend`` starts it as a session (and process-group) leader, with its stdout and
stderr already on the job's log and a fixed, minimal environment. It closes every other
inherited descriptor but the plan's ``keep_fd``, reads and deletes ``launch.json``, runs the
job (``jail.run``, or for isolation ``none`` a plain child in its own process group), records
``{"exit_code", "error", "finished_at"}``, then SIGKILLs its own process group so nothing the
job left behind outlives it (this ends the supervisor too; the record is already written).
On SIGTERM (``LocalBackend`` signals the whole group) it keeps waiting, so the job's own exit
status is what gets recorded.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import UTC, datetime

from . import jail, launch
from .plan import EXIT_RECORD, LAUNCH_FILE, Plan

__all__ = ["main"]

_FD_LIMIT = 1 << 20
_OOM_KILL = "oom_kill"


def _write_record(job_dir: str, exit_code: int | None, error: str | None) -> None:
    record = {
        "exit_code": exit_code,
        "error": error,
        "finished_at": datetime.now(UTC).isoformat(),
    }
    tmp = os.path.join(job_dir, f".{EXIT_RECORD}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(record, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, os.path.join(job_dir, EXIT_RECORD))


def _close_inherited(keep: int | None) -> None:
    if keep is None:
        os.closerange(3, _FD_LIMIT)
    else:
        os.closerange(3, keep)
        os.closerange(keep + 1, _FD_LIMIT)


def _read_plan(job_dir: str) -> Plan:
    path = os.path.join(job_dir, LAUNCH_FILE)
    with open(path, encoding="utf-8") as plan_file:
        text = plan_file.read()
    os.unlink(path)
    return Plan.from_json(text)


def _run_plain(plan: Plan, stop: jail.StopFlag) -> tuple[int | None, str | None]:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    job = launch.start(plan, plan.work, new_session=False, join_cgroups=True)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if stop.requested:
        # The group's SIGTERM came before the job existed, so the job never saw it.
        os.kill(job.pid, signal.SIGTERM)
    status = os.waitpid(job.pid, 0)[1]
    return launch.outcome(plan.command[0], status, job.error_fd)


def _out_of_memory(plan: Plan) -> str | None:
    """Why the job died, when the kernel killed it for exceeding its memory cgroup."""
    for path in plan.oom_files:
        try:
            with open(path, encoding="ascii") as counters:
                lines = counters.read().splitlines()
        except OSError:
            continue
        for line in lines:
            name, _, value = line.partition(" ")
            if name == _OOM_KILL and value.strip() not in ("", "0"):
                return (
                    f"out of memory: the job exceeded its limit of {plan.memory_bytes} bytes "
                    "and the kernel killed it"
                )
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: supervisor JOB_DIR", file=sys.stderr)
        return 2
    job_dir = argv[0]
    stop = jail.StopFlag()
    signal.signal(signal.SIGTERM, stop.handle)
    exit_code: int | None = None
    error: str | None = "cancelled before the command started"
    try:
        plan = _read_plan(job_dir)
    except (OSError, ValueError, TypeError) as exc:
        plan, error = None, f"could not read the job's plan: {exc}"
    if plan is not None:
        _close_inherited(plan.keep_fd)
        if not stop.requested:
            run = jail.run if plan.sandboxed else _run_plain
            try:
                exit_code, error = run(plan, stop)
            except OSError as exc:  # no pipe, no fork: nothing started
                error = f"could not start the job: {exc.strerror or exc}"
        error = _out_of_memory(plan) or error
    if error is not None:
        print(f"ignara: {error}", file=sys.stderr, flush=True)
    _write_record(job_dir, exit_code, error)
    sys.stdout.flush()
    sys.stderr.flush()
    # Only when this process leads its own group: otherwise the group is someone else's.
    if os.getpgrp() == os.getpid():
        os.killpg(0, signal.SIGKILL)
    return 0
