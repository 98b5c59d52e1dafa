"""Process identity on Linux: a pid plus its start time names one process, even across reuse.

A pid alone is not enough to follow or signal a job after a gateway restart: the job may
have ended and its pid been given to an unrelated process. The start time in
``/proc/<pid>/stat`` (field 22, clock ticks since boot) tells them apart.
"""

from __future__ import annotations

import contextlib
import os
import signal

__all__ = ["process_alive", "signal_group", "start_ticks"]

# Fields of /proc/<pid>/stat after the ")" that closes the command name: state is field 3,
# starttime field 22, so their offsets in what follows the ")" are 0 and 19.
_STATE_OFFSET = 0
_STARTTIME_OFFSET = 19
_GONE_STATES = frozenset({"Z", "X", "x"})


def _read_stat(pid: int) -> tuple[str, int] | None:
    """``(state, start ticks)`` of ``pid``, or ``None`` if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            raw = stat.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name may itself contain spaces and parentheses; it ends at the last ")".
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return fields[_STATE_OFFSET].decode("ascii"), int(fields[_STARTTIME_OFFSET])
    except (IndexError, ValueError, UnicodeDecodeError):
        return None


def start_ticks(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot, or ``None`` if it is gone."""
    stat = _read_stat(pid)
    return None if stat is None else stat[1]


def process_alive(pid: int, ticks: int) -> bool:
    """Whether the process that started at ``ticks`` with this pid still runs.

    A zombie counts as gone; if it is this process's own child it is reaped here, since
    nothing else waits for it (the local backend follows its jobs by polling).
    """
    stat = _read_stat(pid)
    if stat is None or stat[1] != ticks:
        return False
    if stat[0] in _GONE_STATES:
        # Identity checked above, so this reaps the right process; not our child: ignore.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return True


def signal_group(pid: int, ticks: int, signum: signal.Signals) -> bool:
    """Send ``signum`` to the process group led by ``pid`` if that leader still runs.

    Returns whether the signal was sent.
    """
    if not process_alive(pid, ticks):
        return False
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        return False
    return True
