"""Whether a process still runs, as the tests that stop or kill one ask it."""

from __future__ import annotations

from pathlib import Path

__all__ = ["alive"]


def alive(pid: int) -> bool:
    """Running and not a zombie (processes reparented to PID 1 may linger as <defunct>)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
