"""Whether a process still runs, as the tests that stop or kill one ask it."""

from __future__ import annotations

import time
from pathlib import Path

__all__ = ["alive", "ended_within"]


def alive(pid: int) -> bool:
    """Running and not a zombie (processes reparented to PID 1 may linger as <defunct>)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def ended_within(pid: int, seconds: float) -> bool:
    """Whether the process is gone (or a zombie) within ``seconds``, looking every 0.2 s."""
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True
