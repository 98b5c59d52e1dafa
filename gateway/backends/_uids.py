"""Per-job uids (isolation ``uid``): one free uid from the operator's range for each job.

A uid is taken by an exclusive flock on ``ROOT/.uids/<uid>.lock``; the job's supervisor
inherits the locked descriptor and holds it until it exits, so a uid is reused only once
every process of its previous job is gone, across gateway restarts and among gateways
sharing the root. Two running jobs never share a uid (and with it a kernel keyring, an
RLIMIT_NPROC count or the right to signal each other).
"""

from __future__ import annotations

import fcntl
import os
import zlib
from pathlib import Path

from gateway.backends._store import lock_file
from gateway.backends.base import BackendError

__all__ = ["allocate"]

_LOCKS = ".uids"
_FIRST_SPARE_FD = 10  # never 0-2 (the supervisor's stdio) nor 3 (where it keeps the lock)


def allocate(root: Path, uids: tuple[int, int], workload_id: str) -> tuple[int, int]:
    """``(uid, fd holding its lock)``; raises ``BackendError`` if every uid is taken."""
    first, last = uids
    count = last - first + 1
    locks = root / _LOCKS
    locks.mkdir(mode=0o700, exist_ok=True)
    # Start where the id hashes to, so concurrent submissions rarely contend.
    start = zlib.crc32(workload_id.encode()) % count
    for step in range(count):
        uid = first + (start + step) % count
        fd = lock_file(locks / f"{uid}.lock")
        if fd is not None:
            spare = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _FIRST_SPARE_FD)
            os.close(fd)
            return uid, spare
    raise BackendError(f"local backend: every job uid in {first}-{last} is in use")
