"""Per-job cgroups: the kernel holds a whole job to its memory, CPU and process limits.

Job cgroups live under ``ignara-jobs/`` in the gateway's own cgroup (or under the cgroup the
operator names), one per job, named ``<root hash>-<workload id>`` so that gateways with
different job roots never share one. cgroup v2 is used where its controllers are available,
else the v1 hierarchies (memory, pids, cpu), each where it is writable.

cgroup v2 forbids enabling controllers for the children of a cgroup that holds processes
(except the root cgroup): a gateway sitting in its own non-root cgroup cannot create limited
children there and needs a delegated, empty cgroup (``IGNARA_LOCAL_BACKEND_CGROUP``); without
one, the backend falls back to rlimits and says so at start.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CgroupTree", "JobCgroup", "Limits", "discover"]

CONTROLLERS = ("memory", "pids", "cpu")
_JOBS = "ignara-jobs"
_CPU_PERIOD_US = 100_000
_MIN_CPU_QUOTA_US = 1_000  # the kernel's lower bound
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Limits:
    memory_bytes: int | None
    cpu_millis: int | None
    processes: int


@dataclass(frozen=True)
class JobCgroup:
    """What the job's supervisor needs: files to join, files that count OOM kills."""

    procs: tuple[str, ...]
    oom_files: tuple[str, ...]
    enforced: frozenset[str]  # of CONTROLLERS


@dataclass(frozen=True)
class CgroupTree:
    """Where job cgroups go: per controller, the ``ignara-jobs`` directory."""

    version: int
    parents: Mapping[str, Path]
    prefix: str

    @property
    def controllers(self) -> frozenset[str]:
        return frozenset(self.parents)

    def _dirs(self, workload_id: str) -> dict[str, Path]:
        name = f"{self.prefix}-{workload_id}"
        return {controller: parent / name for controller, parent in self.parents.items()}

    def create(self, workload_id: str, limits: Limits) -> JobCgroup:
        """The job's cgroups with its limits written; raises ``OSError``."""
        wanted = {
            "memory": limits.memory_bytes is not None,
            "cpu": limits.cpu_millis is not None,
            "pids": True,
        }
        dirs = {c: d for c, d in self._dirs(workload_id).items() if wanted[c]}
        for directory in set(dirs.values()):
            directory.mkdir(exist_ok=True)
        if self.version == 2:
            return self._limit_v2(next(iter(dirs.values())), limits, frozenset(dirs))
        return self._limit_v1(dirs, limits)

    def _limit_v2(self, directory: Path, limits: Limits, enforced: frozenset[str]) -> JobCgroup:
        oom_files: tuple[str, ...] = ()
        if limits.memory_bytes is not None:
            _write(directory / "memory.max", limits.memory_bytes)
            _write_if_present(directory / "memory.swap.max", 0)
            # On OOM, the kernel kills the whole job, not one process of it.
            _write_if_present(directory / "memory.oom.group", 1)
            oom_files = (str(directory / "memory.events"),)
        if limits.cpu_millis is not None:
            _write(directory / "cpu.max", f"{_cpu_quota(limits.cpu_millis)} {_CPU_PERIOD_US}")
        _write(directory / "pids.max", limits.processes)
        return JobCgroup((str(directory / "cgroup.procs"),), oom_files, enforced)

    def _limit_v1(self, dirs: Mapping[str, Path], limits: Limits) -> JobCgroup:
        oom_files: tuple[str, ...] = ()
        if "memory" in dirs and limits.memory_bytes is not None:
            memory = dirs["memory"]
            _write(memory / "memory.limit_in_bytes", limits.memory_bytes)
            # With swap accounting, swap counts too: the limit is not doubled by swapping.
            _write_if_present(memory / "memory.memsw.limit_in_bytes", limits.memory_bytes)
            oom_files = (str(memory / "memory.oom_control"),)
        if "cpu" in dirs and limits.cpu_millis is not None:
            _write(dirs["cpu"] / "cpu.cfs_period_us", _CPU_PERIOD_US)
            _write(dirs["cpu"] / "cpu.cfs_quota_us", _cpu_quota(limits.cpu_millis))
        if "pids" in dirs:
            _write(dirs["pids"] / "pids.max", limits.processes)
        procs = tuple(str(directory / "cgroup.procs") for directory in dirs.values())
        return JobCgroup(procs, oom_files, frozenset(dirs))

    def remove(self, workload_id: str) -> bool:
        """Remove the job's cgroups; ``False`` while some still hold processes."""
        removed = True
        for directory in set(self._dirs(workload_id).values()):
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise
                removed = False
        return removed

    def paths(self, workload_id: str) -> dict[str, Path]:
        """The job's cgroup directory per controller (whether or not it exists)."""
        return self._dirs(workload_id)


def _cpu_quota(cpu_millis: int) -> int:
    return max(_MIN_CPU_QUOTA_US, cpu_millis * _CPU_PERIOD_US // 1000)


def _write(path: Path, value: object) -> None:
    path.write_text(f"{value}\n", encoding="ascii")


def _write_if_present(path: Path, value: object) -> None:
    if path.exists():
        _write(path, value)


# -- discovery -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Mount:
    point: Path
    root: str
    fstype: str
    options: frozenset[str]


def _mounts() -> list[_Mount]:
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as info:
        for line in info.read().splitlines():
            before, _, after = line.partition(" - ")
            fields, tail = before.split(" "), after.split(" ")
            if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
                continue
            found.append(
                _Mount(
                    point=Path(_OCTAL_ESCAPE.sub(lambda m: chr(int(m[1], 8)), fields[4])),
                    root=fields[3],
                    fstype=tail[0],
                    options=frozenset(tail[2].split(",")),
                )
            )
    return found


def _own_cgroups() -> dict[str, str]:
    """Controller (or ``""`` for v2) -> this process's cgroup path."""
    own: dict[str, str] = {}
    with open("/proc/self/cgroup", encoding="utf-8") as lines:
        for line in lines.read().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                own[controller] = path
    return own


def _directory(mount: _Mount, path: str) -> Path:
    # The mount shows the hierarchy from its own root (a container's cgroup namespace).
    if mount.root != "/" and (path == mount.root or path.startswith(mount.root + "/")):
        path = path[len(mount.root) :]
    return mount.point / path.lstrip("/")


def discover(root: Path, parent: str | None) -> tuple[CgroupTree | None, str]:
    """The tree job cgroups go in, or ``None`` and why there is none."""
    prefix = hashlib.sha256(os.fsencode(root.resolve())).hexdigest()[:8]
    try:
        mounts, own = _mounts(), _own_cgroups()
    except (OSError, ValueError) as exc:
        return None, f"cannot read this process's cgroups: {exc}"
    reasons = []
    for mount in mounts:
        if mount.fstype != "cgroup2":
            continue
        tree, reason = _v2(mount, parent or own.get("", "/"), prefix)
        if tree is not None:
            return tree, ""
        reasons.append(reason)
    parents: dict[str, Path] = {}
    for mount in mounts:
        for controller in CONTROLLERS:
            if mount.fstype == "cgroup" and controller in mount.options:
                base = _directory(mount, parent or own.get(controller, "/"))
                with contextlib.suppress(OSError):
                    parents[controller] = _make_jobs_dir(base)
    if parents:
        return CgroupTree(1, parents, prefix), ""
    reasons.append("no writable cgroup v1 memory, pids or cpu hierarchy")
    return None, "; ".join(reasons)


def _make_jobs_dir(base: Path) -> Path:
    jobs = base / _JOBS
    jobs.mkdir(exist_ok=True)
    if not os.access(jobs / "cgroup.procs", os.W_OK):
        raise PermissionError(errno.EACCES, "not writable", str(jobs))
    return jobs


def _v2(mount: _Mount, path: str, prefix: str) -> tuple[CgroupTree | None, str]:
    base = _directory(mount, path)
    try:
        available = set((base / "cgroup.controllers").read_text().split()) & set(CONTROLLERS)
        if not available:
            return None, f"cgroup v2 at {base} offers none of {', '.join(CONTROLLERS)}"
        enable = " ".join(f"+{c}" for c in sorted(available))
        (base / "cgroup.subtree_control").write_text(enable)
        jobs = _make_jobs_dir(base)
        (jobs / "cgroup.subtree_control").write_text(enable)
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            return None, (
                f"cgroup v2 at {base} holds processes, so its children cannot be limited "
                "(name an empty delegated cgroup with IGNARA_LOCAL_BACKEND_CGROUP)"
            )
        return None, f"cgroup v2 at {base} is not usable: {exc.strerror or exc}"
    return CgroupTree(2, {c: jobs for c in available}, prefix), ""
