"""The gateway's side of the local sandbox: probe what isolation holds, prepare each job's
plan (uid, cgroup, limits, environment), start its supervisor, clean up after it.

The probe runs a real job (``true``) through the same supervisor, in the mode to be used,
with a cgroup if one is writable: whatever it reports is what holds, not what should.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gateway.backends import _cgroups, _uids
from gateway.backends._cgroups import CgroupTree, Limits
from gateway.backends._store import JobPaths, read_exit, read_tail
from gateway.backends._supervisor.plan import BOOT, HOME, LAUNCH_FILE, Plan
from gateway.backends.base import JobLimits, JobSpec
from gateway.backends.isolation import Isolation, IsolationMode, IsolationSettings

__all__ = ["DEFAULT_PATH", "RELEASE_SECONDS", "Prepared", "Sandbox"]

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_SUPERVISOR_PARENT = Path(__file__).parent  # holds the _supervisor package
_KEEP_FD = 3
_NAMESPACES = ("mount", "pid", "net", "ipc", "uts", "cgroup")
_PROBE_COMMAND = ("true",)
_PROBE_LIMITS = JobLimits(memory_bytes=256 * 2**20, cpu_millis=1000)
_PROBE_SECONDS = 20.0
# RLIMIT_NPROC counts per user namespace only since Linux 5.14; before, it would count
# every process of the gateway's user on the host.
_NPROC_PER_USERNS = (5, 14)
RELEASE_SECONDS = 5.0  # how long a job's last processes may take to leave its cgroup
# Signals the gateway (or its server) may ignore: ignored dispositions survive exec, so the
# supervisor would inherit them without this.
_DEFAULT_SIGNALS = frozenset(
    {
        signal.SIGHUP,
        signal.SIGINT,
        signal.SIGQUIT,
        signal.SIGTERM,
        signal.SIGPIPE,
        signal.SIGXFSZ,
        signal.SIGUSR1,
        signal.SIGUSR2,
    }
)


@dataclass(frozen=True)
class Prepared:
    """A job ready to start: its plan is written; ``lock_fd`` (or -1) is its uid's lock."""

    plan: Plan
    lock_fd: int


class Sandbox:
    """How this backend runs jobs; ``probe()`` once before the first job (cached)."""

    def __init__(self, root: Path, settings: IsolationSettings, python: str, path: str) -> None:
        self._root = root
        self._settings = settings
        self._python = python
        self._path = path
        self._lock = threading.Lock()
        self._isolation: Isolation | None = None
        self._cgroups: CgroupTree | None = None

    # -- probing --------------------------------------------------------------------------

    def probe(self) -> Isolation:
        """What isolation holds here; probed on the first call (blocks up to ~20 s)."""
        with self._lock:
            if self._isolation is None:
                try:
                    self._prepare_root()
                except OSError as exc:
                    reason = f"cannot prepare the job root {self._root}: {exc.strerror or exc}"
                    self._isolation = Isolation(IsolationMode.NONE, self._settings.unsafe, reason)
                    return self._isolation
                self._cgroups, self._isolation = self._probe()
            return self._isolation

    def _prepare_root(self) -> None:
        # Other uids (jobs among them) must not even list the root: 0700, owned by us.
        self._root.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = self._root.stat()
        if info.st_uid == os.geteuid() and info.st_mode & 0o077:
            self._root.chmod(0o700)

    def _probe(self) -> tuple[CgroupTree | None, Isolation]:
        """The cgroups jobs get (if any) and the isolation that holds."""
        settings = self._settings
        cgroups, cgroup_reason = _cgroups.discover(self._root, settings.cgroup)
        if settings.isolation == "none":
            reason = "isolation set to none"
            return cgroups, self._report(IsolationMode.NONE, reason, cgroups, cgroup_reason)
        root_user = os.geteuid() == 0
        wanted = settings.isolation
        if wanted == "auto":
            wanted = "uid" if root_user else "userns"
        mode = IsolationMode(wanted)
        if mode is IsolationMode.UID and not root_user:
            error: str | None = "uid isolation needs the gateway to run as root"
        elif mode is IsolationMode.USERNS and root_user:
            error = "userns isolation is for an unprivileged gateway; as root, use uid"
        else:
            error = self._trial(mode, cgroups)
            if error is not None and cgroups is not None and self._trial(mode, None) is None:
                cgroup_reason = f"the job cgroups did not work: {error}"
                cgroups, error = None, None
        if error is not None:
            reason = f"{mode.value} isolation failed: {error}"
            return cgroups, self._report(IsolationMode.NONE, reason, cgroups, "")
        return cgroups, self._report(mode, "", cgroups, cgroup_reason)

    def _report(
        self, mode: IsolationMode, reason: str, cgroups: CgroupTree | None, cgroup_reason: str
    ) -> Isolation:
        settings = self._settings
        sandboxed = mode is not IsolationMode.NONE
        held = cgroups.controllers if cgroups is not None else frozenset()
        via = f"cgroup v{cgroups.version}" if cgroups is not None else ""
        why = f" ({cgroup_reason})" if cgroup_reason and not held else ""
        limits = {
            "memory": via if "memory" in held else f"RLIMIT_AS, per process{why}",
            "cpu": via if "cpu" in held else f"not enforced, no rlimit caps CPU{why}",
            "processes": (
                f"{via}, {settings.max_processes}"
                if "pids" in held
                else f"RLIMIT_NPROC, {settings.max_processes}"
                if self._nproc_rlimit(mode)
                else f"not enforced{why}"
            ),
        }
        first, last = settings.uids
        job_user = {
            IsolationMode.UID: f"their own uid (from {first}-{last})",
            IsolationMode.USERNS: "the gateway's uid inside a user namespace",
            IsolationMode.NONE: "the gateway's own user",
        }[mode]
        namespaces = (
            _NAMESPACES
            if settings.network == "loopback"
            else tuple(n for n in _NAMESPACES if n != "net")
        )
        if mode is IsolationMode.USERNS:
            namespaces = ("user", *namespaces)
        return Isolation(
            mode=mode,
            unsafe=settings.unsafe,
            reason=reason,
            namespaces=namespaces if sandboxed else (),
            network=settings.network if sandboxed else "host",
            job_user=job_user,
            limits=limits,
        )

    def _nproc_rlimit(self, mode: IsolationMode) -> bool:
        if mode is IsolationMode.UID:
            return True
        if mode is IsolationMode.USERNS:
            return _kernel_version() >= _NPROC_PER_USERNS
        return False

    def _trial(self, mode: IsolationMode, cgroups: CgroupTree | None) -> str | None:
        """Run ``true`` as a job in ``mode``; ``None`` if it ran, else why not."""
        probe_dir = Path(tempfile.mkdtemp(prefix=".probe-", dir=self._root))
        name = f"probe-{probe_dir.name[len('.probe-') :].lower()}"
        paths = JobPaths(probe_dir)
        try:
            job = JobSpec("probe", _PROBE_COMMAND, {}, 60, _PROBE_LIMITS)
            prepared = self._prepare(job, paths, mode, cgroups, name)
            try:
                pid = self.spawn(paths, prepared)
            finally:
                if prepared.lock_fd >= 0:
                    os.close(prepared.lock_fd)
            if not _wait_child(pid, _PROBE_SECONDS):
                return f"the probe job did not finish within {_PROBE_SECONDS:.0f} s"
            record = read_exit(paths)
            if record is not None and record.exit_code == 0 and record.error is None:
                return None
            if record is not None and record.error:
                return record.error
            tail = read_tail(paths.log, 400).decode(errors="replace").strip()
            return tail or "the probe job failed without saying why"
        except OSError as exc:
            return f"cannot run the probe job: {exc.strerror or exc}"
        finally:
            if cgroups is not None:
                _settle_cgroup(cgroups, name, RELEASE_SECONDS)
            shutil.rmtree(probe_dir, ignore_errors=True)

    # -- jobs -----------------------------------------------------------------------------

    @property
    def mode(self) -> IsolationMode:
        return self.probe().mode

    def prepare(self, job: JobSpec, paths: JobPaths) -> Prepared:
        """Allocate the job's uid and cgroup and write its plan; raises ``OSError``."""
        self.probe()
        return self._prepare(job, paths, self.mode, self._cgroups, job.workload_id)

    def _prepare(
        self,
        job: JobSpec,
        paths: JobPaths,
        mode: IsolationMode,
        cgroups: CgroupTree | None,
        cgroup_name: str,
    ) -> Prepared:
        settings = self._settings
        sandboxed = mode is not IsolationMode.NONE
        for directory in (paths.work, paths.tmp, paths.rootfs):
            directory.mkdir(mode=0o700, exist_ok=True)
        uid = gid = None
        lock_fd = -1
        if mode is IsolationMode.UID:
            uid, lock_fd = _uids.allocate(self._root, settings.uids, job.workload_id)
            gid = uid
            for directory in (paths.work, paths.tmp):
                os.chown(directory, uid, gid)
        elif mode is IsolationMode.USERNS:
            uid, gid = os.getuid(), os.getgid()
        try:
            limits = Limits(job.limits.memory_bytes, job.limits.cpu_millis, settings.max_processes)
            cgroup = cgroups.create(cgroup_name, limits) if cgroups is not None else None
            enforced = cgroup.enforced if cgroup is not None else frozenset()
            env = {"PATH": self._path, "HOME": HOME if sandboxed else str(paths.work)}
            env["LANG"] = "C.UTF-8"
            env.update(job.env)
            env["IGNARA_WORKLOAD_ID"] = job.workload_id
            plan = Plan(
                job_dir=os.path.abspath(paths.dir),
                command=job.command,
                env=env,
                isolation=mode.value,
                network=settings.network,
                uid=uid,
                gid=gid,
                readonly_paths=settings.readonly_paths,
                cgroup_procs=cgroup.procs if cgroup is not None else (),
                oom_files=cgroup.oom_files if cgroup is not None else (),
                memory_bytes=limits.memory_bytes,
                rlimit_as=None if "memory" in enforced else limits.memory_bytes,
                rlimit_nproc=(
                    None if "pids" in enforced or not self._nproc_rlimit(mode) else limits.processes
                ),
                keep_fd=_KEEP_FD if lock_fd >= 0 else None,
            )
            _write_private(paths.dir / LAUNCH_FILE, plan.to_json())
        except BaseException:
            if lock_fd >= 0:
                os.close(lock_fd)
            raise
        return Prepared(plan, lock_fd)

    def spawn(self, paths: JobPaths, prepared: Prepared) -> int:
        """Start the job's supervisor as a session leader; its pid. Raises ``OSError``."""
        argv = [self._python, "-I", "-S", "-c", BOOT, str(_SUPERVISOR_PARENT), str(paths.dir)]
        actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = []
        if prepared.lock_fd >= 0:
            actions.append((os.POSIX_SPAWN_DUP2, prepared.lock_fd, _KEEP_FD))
        log_flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        actions += [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, str(paths.log), log_flags, 0o600),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ]
        return os.posix_spawn(
            self._python,
            argv,
            # Fixed: nothing of the gateway's environment, nothing of the job's.
            {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"},
            file_actions=actions,
            setsid=True,
            setsigmask=(),
            setsigdef=_DEFAULT_SIGNALS,
        )

    def release(self, workload_id: str, wait: float = 0.0) -> None:
        """Remove the job's cgroups, waiting up to ``wait`` s for its last processes."""
        self.probe()
        if self._cgroups is not None:
            _settle_cgroup(self._cgroups, workload_id, wait)

    def cgroup_paths(self, workload_id: str) -> dict[str, Path]:
        """Where the job's cgroups are (empty without cgroups); for operators and tests."""
        return {} if self._cgroups is None else self._cgroups.paths(workload_id)


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def _wait_child(pid: int, timeout: float) -> bool:
    """Wait for our child ``pid``; kill its group and say ``False`` after ``timeout``."""
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return True
        time.sleep(0.01)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return False


def _settle_cgroup(cgroups: CgroupTree, name: str, timeout: float) -> None:
    """Remove a job's cgroups, waiting (bounded) for its last processes to be gone."""
    give_up = time.monotonic() + timeout
    with contextlib.suppress(OSError):
        while not cgroups.remove(name) and time.monotonic() < give_up:
            time.sleep(0.02)


def _kernel_version() -> tuple[int, int]:
    parts = os.uname().release.split(".")
    try:
        return int(parts[0]), int(parts[1].split("-")[0])
    except (IndexError, ValueError):
        return 0, 0
