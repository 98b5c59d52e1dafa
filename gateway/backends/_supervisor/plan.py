"""What the gateway and a job's supervisor share: the job directory's layout and the plan.

The gateway writes ``launch.json`` (mode 0600) into the job's directory before it starts the
supervisor; the supervisor reads it and deletes it at once, since the job's environment may
hold the tenant's secrets. Neither the command nor the environment ever goes on the
supervisor's own command line or environment: the first is readable by every local user in
``/proc``, the second would let a job's ``LD_PRELOAD`` run code in the (possibly root)
supervisor outside the sandbox.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

__all__ = [
    "BOOT",
    "EXIT_RECORD",
    "HOME",
    "HOSTNAME",
    "LAUNCH_FILE",
    "ROOTFS",
    "TMP",
    "WORK",
    "Plan",
]

# Where the job's own files live, under its directory; see gateway.backends._store.
EXIT_RECORD = "exit.json"
LAUNCH_FILE = "launch.json"
WORK = "work"
TMP = "tmp"
ROOTFS = "rootfs"  # an empty directory: the sandbox's root is a tmpfs mounted there

# Inside the sandbox.
HOME = "/home/job"
HOSTNAME = "ignara-job"

# The supervisor's entry point: its package's parent directory goes on sys.path (last, so
# nothing there can shadow the standard library), and the package imports as
# ``_supervisor`` without the gateway (``-I`` adds no path itself, ``-S`` no site-packages).
BOOT = (
    "import sys; sys.path.append(sys.argv[1]); "
    "from _supervisor.runner import main; sys.exit(main(sys.argv[2:]))"
)


@dataclass(frozen=True)
class Plan:
    """How to run one job. ``isolation`` is ``uid``, ``userns`` or ``none``.

    ``uid``/``gid``: who the job is (``uid``: switched to; ``userns``: the gateway's own ids,
    mapped into the job's user namespace). ``cgroup_procs``: ``cgroup.procs`` files the job
    joins; ``oom_files``: files whose ``oom_kill N`` line says the kernel killed it for
    memory. ``rlimit_as``/``rlimit_nproc``: limits set where no cgroup enforces them.
    ``keep_fd``: an fd the supervisor keeps open (never passed to the job): the lock on its uid.
    """

    job_dir: str
    command: tuple[str, ...]
    env: dict[str, str]
    isolation: str = "none"
    network: str = "loopback"
    uid: int | None = None
    gid: int | None = None
    readonly_paths: tuple[str, ...] = ()
    cgroup_procs: tuple[str, ...] = ()
    oom_files: tuple[str, ...] = ()
    memory_bytes: int | None = None
    rlimit_as: int | None = None
    rlimit_nproc: int | None = None
    keep_fd: int | None = None

    @property
    def work(self) -> str:
        return os.path.join(self.job_dir, WORK)

    @property
    def tmp(self) -> str:
        return os.path.join(self.job_dir, TMP)

    @property
    def rootfs(self) -> str:
        return os.path.join(self.job_dir, ROOTFS)

    @property
    def sandboxed(self) -> bool:
        return self.isolation != "none"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Plan:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("the plan is not a JSON object")
        for key in ("command", "readonly_paths", "cgroup_procs", "oom_files"):
            data[key] = tuple(data.get(key) or ())
        return cls(**data)
