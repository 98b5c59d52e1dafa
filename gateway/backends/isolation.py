"""How the local backend isolates jobs: the operator's settings and what the probe found.

Modes (``IGNARA_LOCAL_BACKEND_ISOLATION``; ``auto`` picks by who runs the gateway):

- ``uid``: the gateway runs as root. Each job runs as its own unprivileged uid and gid
  (taken from ``uids``, held for as long as its supervisor lives; no supplementary groups),
  in new mount, PID, network, IPC, UTS and cgroup namespaces.
- ``userns``: the gateway runs as an ordinary user (``make run`` on a laptop). A new user
  namespace maps only the gateway's own uid, in which the job holds no capability; the same
  other namespaces. The job shares the gateway's uid on the host, so the namespaces alone
  keep it from the gateway: files outside the sandbox's root are not there, the gateway's
  processes cannot be named. Needs unprivileged user namespaces (some distributions turn
  them off: sysctl ``kernel.unprivileged_userns_clone``, ``user.max_user_namespaces``, or
  AppArmor's ``kernel.apparmor_restrict_unprivileged_userns`` on Ubuntu 24.04).
- ``none``: no isolation (forced, or neither of the above works here). Then the backend
  refuses every job unless the operator set ``IGNARA_LOCAL_BACKEND_UNSAFE=1``, which runs
  jobs as the gateway's own user with all its powers.

In both sandboxed modes: no_new_privs, an empty capability bounding set, nosuid mounts, the
minimal root of ``_supervisor.jail`` (none of the gateway's files, environment or processes),
loopback-only networking unless ``network`` is ``host``. Limits per job: memory and CPU from
the workload's requests, a process (task) cap from ``max_processes``, through a cgroup
where one is writable, else ``RLIMIT_AS`` (per process, address space) and ``RLIMIT_NPROC``;
CPU cannot be capped without a cgroup.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

__all__ = [
    "DEFAULT_MAX_PROCESSES",
    "DEFAULT_UIDS",
    "Isolation",
    "IsolationMode",
    "IsolationSettings",
]

DEFAULT_UIDS = (900_000, 965_535)  # first and last job uid: above common subuid ranges
DEFAULT_MAX_PROCESSES = 4096  # tasks (threads count) per job
_REQUESTABLE = ("auto", "uid", "userns", "none")
_NETWORKS = ("loopback", "host")
_HIGHEST_UID = 2**32 - 2  # (uid_t)-1 means "no change" to the kernel


class IsolationMode(StrEnum):
    UID = "uid"
    USERNS = "userns"
    NONE = "none"


@dataclass(frozen=True)
class IsolationSettings:
    """The operator's choices; see the module docstring. Raises ``ValueError`` if invalid."""

    isolation: str = "auto"
    unsafe: bool = False
    network: str = "loopback"
    uids: tuple[int, int] = DEFAULT_UIDS
    max_processes: int = DEFAULT_MAX_PROCESSES
    readonly_paths: tuple[str, ...] = ()
    cgroup: str | None = None  # a cgroup (path in the hierarchy) to create job cgroups under

    def __post_init__(self) -> None:
        if self.isolation not in _REQUESTABLE:
            raise ValueError(f"local backend isolation must be one of {', '.join(_REQUESTABLE)}")
        if self.network not in _NETWORKS:
            raise ValueError(f"local backend network must be one of {', '.join(_NETWORKS)}")
        first, last = self.uids
        if not 1000 <= first <= last <= _HIGHEST_UID:
            raise ValueError(f"job uids must be a range FIRST-LAST within 1000-{_HIGHEST_UID}")
        if not 2 <= self.max_processes <= 4_194_304:
            raise ValueError("the local backend's process cap must be between 2 and 4194304")
        for path in self.readonly_paths:
            if not os.path.isabs(path) or os.path.normpath(path) != path or path == "/":
                raise ValueError(f"read-only path {path!r} must be absolute, normalized, not /")
        if self.cgroup is not None and not self.cgroup.startswith("/"):
            raise ValueError("the local backend's cgroup must be a path like /ignara")


@dataclass(frozen=True)
class Isolation:
    """What holds on this host, as the start-up probe found it."""

    mode: IsolationMode
    unsafe: bool = False
    reason: str = ""
    namespaces: tuple[str, ...] = ()
    network: str = "host"
    job_user: str = "the gateway's own user"
    limits: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "limits", MappingProxyType(dict(self.limits)))

    @property
    def severity(self) -> int:
        """How loudly to log it: an error when jobs are refused, a warning when they run
        unisolated or on the host's network."""
        if not self.runs_jobs:
            return logging.ERROR
        if self.mode is IsolationMode.NONE or self.network == "host":
            return logging.WARNING
        return logging.INFO

    @property
    def runs_jobs(self) -> bool:
        return self.mode is not IsolationMode.NONE or self.unsafe

    def refusal(self) -> str | None:
        if self.runs_jobs:
            return None
        return (
            "the local backend runs no jobs: it cannot isolate them on this host "
            f"({self.reason}); an operator may allow unisolated jobs with "
            "IGNARA_LOCAL_BACKEND_UNSAFE=1"
        )

    def describe(self) -> str:
        """One line for the start-up log."""
        limits = ", ".join(f"{name}: {how}" for name, how in self.limits.items())
        if self.mode is IsolationMode.NONE:
            if not self.unsafe:
                return (
                    f"none ({self.reason}): the local backend REFUSES every job; "
                    "set IGNARA_LOCAL_BACKEND_UNSAFE=1 to run them unisolated"
                )
            return (
                f"NONE, UNSAFE ({self.reason}): IGNARA_LOCAL_BACKEND_UNSAFE=1, so tenants' jobs "
                "run as the gateway's own user with its powers: they can read its database, "
                "key pepper, environment and other jobs' files, and signal it; "
                f"limits: {limits}"
            )
        network = (
            "loopback only"
            if self.network == "loopback"
            else "THE HOST'S (IGNARA_LOCAL_BACKEND_NETWORK=host: jobs reach every local "
            "service, the gateway's database and Redis included)"
        )
        return (
            f"{self.mode.value}: jobs run as {self.job_user}, no_new_privs, no capabilities; "
            f"namespaces: {', '.join(self.namespaces)}; network: {network}; limits: {limits}"
        )
