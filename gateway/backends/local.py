"""The local backend, the embedded default: each job is a sandboxed process tree on this machine.

Usage::

    backend = LocalBackend(Path("/var/lib/ignara/jobs"), grace_seconds=5.0)
    backend.probe()               # at start-up: which isolation holds (see ``isolation``)
    await backend.resume()        # follow jobs a previous process left running
    await backend.submit(JobSpec("wl-1", ("python3", "train.py"), {}, 3600))
    status = await backend.status("wl-1")
    await backend.close()         # leaves running jobs running; the next start resumes them

How a job runs. ``submit`` claims ``ROOT/<id>/`` (a directory renamed into place, so exactly
one submission of an id wins, across processes too), writes the job's plan (``launch.json``:
command, environment, uid, cgroup, limits) and starts a small supervisor (``_supervisor``)
with ``os.posix_spawn`` as the leader of a new session and process group, with a fixed
minimal environment, stdin from /dev/null and stdout+stderr appended to
``ROOT/<id>/output.log``. The supervisor runs the command (an argv list, no shell) in the
sandbox (``_supervisor.jail``: its own uid or user namespace, mount, PID, network, IPC, UTS
and cgroup namespaces, a minimal read-only root, ``ROOT/<id>/work`` as ``/home/job``, its
cwd and HOME) and records its exit status in ``exit.json``. The job's environment is a
minimal base (``PATH``, ``HOME``, ``LANG``), then ``job.env``, then ``IGNARA_WORKLOAD_ID``;
nothing of the gateway's environment reaches it. See ``_store`` for the files, and
``isolation`` for the modes, their settings and what each keeps from the job.

Isolation is probed once (``probe()``, a real sandboxed ``true``). When none holds, the
backend refuses every job (``refusal()`` says why; ``submit`` raises ``JobRefusedError``)
unless the operator set ``unsafe`` (``IGNARA_LOCAL_BACKEND_UNSAFE=1``): then jobs run as
the gateway's own user, in ``ROOT/<id>/work``, as before there was a sandbox.

Why not ``asyncio.create_subprocess_exec``: its transport SIGKILLs the child when it is
closed or garbage-collected, which would kill every running job when the gateway closes its
backend; jobs must outlive the gateway process. So the supervisor is spawned bare and a
watcher task per job polls it (every ``poll_seconds``): it enforces ``max_runtime_seconds``
and writes the final state to ``status.json``.

Decisions:

- Stopping (cancel, max runtime): SIGTERM to the supervisor's process group (the sandbox's
  PID 1 passes it to every process of the job), SIGKILL after ``grace_seconds``. A timed-out
  job is ``failed`` with "exceeded max runtime of N s". When a job ends, or its PID 1 is
  killed, the kernel kills everything left in its PID namespace: a job cannot escape cancel
  or its max runtime with setsid() or a double fork. (Without a sandbox, with ``unsafe``,
  it still can.)
- Limits: ``job.limits`` (memory, CPU) and the backend's process cap, through a per-job
  cgroup where one is writable, else rlimits; a job past its memory limit is killed and
  ``failed`` ("out of memory: ..."), one forking past its cap gets EAGAIN.
- Cancel wins over an exit it did not see: a job that exits at the moment it is cancelled is
  reported ``cancelled``. Cancelling an unknown or finished job does nothing.
- Command not found or not executable (inside the sandbox: only the system's and the
  operator's read-only paths are there): the job is accepted and ends ``failed`` with a
  message ("command not found: 'x'"); a malformed spec never gets here (``JobSpec``
  refuses it).
- ``close()`` stops following jobs but leaves them running. A new ``LocalBackend`` on the same
  root (after a restart) resumes following every job whose supervisor still runs (same pid
  and start time) and reports a job whose supervisor is gone and left no exit record as
  ``failed``: "lost: the gateway restarted while it ran". A job that ended while no gateway
  watched it is reported from its exit record, exit code included.
- One process follows a job at a time (a flock on ``owner.lock``); others sharing the root
  read its status, and their cancel signals the job and waits for the owner to record it.
- Logs grow without bound on disk; reads are bounded (``MAX_LOG_TAIL_BYTES``).
- Linux only (``/proc``, namespaces, ``posix_spawn`` with ``setsid``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from gateway.backends import _store
from gateway.backends._process import process_alive, signal_group, start_ticks
from gateway.backends._sandbox import DEFAULT_PATH, RELEASE_SECONDS, Sandbox
from gateway.backends._store import ExitRecord, JobPaths, Record, StopRequest
from gateway.backends.base import (
    WORKLOAD_ID_PATTERN,
    BackendClosedError,
    BackendError,
    JobRefusedError,
    JobSpec,
    JobState,
    JobStatus,
    validate_workload_id,
)
from gateway.backends.isolation import Isolation, IsolationSettings

__all__ = [
    "CANCELLED_MESSAGE",
    "DEFAULT_PATH",
    "LOST_MESSAGE",
    "MAX_LOG_TAIL_BYTES",
    "LocalBackend",
]

MAX_LOG_TAIL_BYTES = 8 * 1024 * 1024
LOST_MESSAGE = "lost: the gateway restarted while it ran"
CANCELLED_MESSAGE = "cancelled"
_NEVER_STARTED_MESSAGE = "lost: the gateway restarted before the job started"
_VANISHED_MESSAGE = "the job's supervisor ended without recording an exit status"
# After SIGKILL the kernel ends the group promptly; this only bounds the wait for the record.
_KILL_WAIT_SECONDS = 5.0
_LOG = logging.getLogger(__name__)


@dataclass(eq=False)
class _Job:
    """A job this backend follows: its supervisor's identity and its deadline."""

    paths: JobPaths
    workload_id: str
    pid: int
    ticks: int
    deadline: datetime
    max_runtime_seconds: int
    lock_fd: int
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def remaining(self) -> float:
        return (self.deadline - datetime.now(UTC)).total_seconds()


class LocalBackend:
    """Runs jobs as local subprocesses under ``root``; see the module docstring."""

    name: str = "local"

    def __init__(
        self,
        root: Path,
        *,
        grace_seconds: float = 5.0,
        poll_seconds: float = 0.2,
        path: str = DEFAULT_PATH,
        python: str | None = None,
        isolation: IsolationSettings | None = None,
    ) -> None:
        if grace_seconds < 0 or poll_seconds <= 0:
            raise ValueError("grace_seconds must be >= 0 and poll_seconds > 0")
        self._root = Path(root)
        self._grace = grace_seconds
        self._poll = poll_seconds
        # The supervisor needs only the standard library, so any Python 3.11+ will do.
        self._sandbox = Sandbox(
            self._root, isolation or IsolationSettings(), python or sys.executable, path
        )
        self._jobs: dict[str, _Job] = {}
        self._closed = False

    @property
    def root(self) -> Path:
        return self._root

    def probe(self) -> Isolation:
        """Which isolation holds; probed by running a sandboxed job on the first call
        (blocking, well under a second on a sane host), then remembered."""
        return self._sandbox.probe()

    def refusal(self) -> str | None:
        """Why this backend runs no jobs (no isolation, and not allowed to run unsafe)."""
        return self.probe().refusal()

    def job_cgroups(self, workload_id: str) -> dict[str, Path]:
        """The job's cgroup directories per controller (none without cgroups)."""
        self.probe()
        return self._sandbox.cgroup_paths(validate_workload_id(workload_id))

    # -- the Backend protocol -------------------------------------------------------------

    async def submit(self, job: JobSpec) -> bool:
        """Start ``job`` unless a job of its id exists (then do nothing and return True)."""
        self._check_open()
        paths = self._paths(job.workload_id)
        refusal = (await asyncio.to_thread(self._sandbox.probe)).refusal()
        if refusal is not None:
            raise JobRefusedError(refusal)
        if paths.dir.exists():
            return True
        with _io_errors("submit"):
            claimed = self._claim(job, paths)
            if claimed is not None:
                self._start(job, paths, claimed)
        return claimed is None

    async def cancel(self, workload_id: str) -> None:
        """Stop the job and return once it is recorded stopped; no-op if unknown or final."""
        self._check_open()
        paths = self._paths(workload_id)
        with _io_errors("cancel"):
            job = self._jobs.get(workload_id)
            if job is None:
                record = _store.read_record(paths)
                if record is None or record.state.is_final:
                    return
                job = self._adopt(paths)
            if job is not None:
                await self._cancel_followed(job)
                return
            record = _store.read_record(paths)
            if record is not None and not record.state.is_final:
                await self._cancel_elsewhere(workload_id, paths, record)

    async def status(self, workload_id: str) -> JobStatus:
        """The job's status; ``unknown`` if no job of that id was ever submitted."""
        self._check_open()
        paths = self._paths(workload_id)
        record = _store.read_record(paths)
        if record is None:
            return JobStatus(state=JobState.UNKNOWN, message="no such job")
        if not record.state.is_final and workload_id not in self._jobs:
            # Nobody may be following it (a previous gateway died): take it over or settle it.
            with _io_errors("status"):
                self._adopt(paths)
            record = _store.read_record(paths) or record
        return record.to_status()

    async def logs(self, workload_id: str, tail_bytes: int = 65536) -> bytes:
        """The last ``tail_bytes`` (at most ``MAX_LOG_TAIL_BYTES``) of the job's output."""
        self._check_open()
        paths = self._paths(workload_id)
        limit = min(max(tail_bytes, 0), MAX_LOG_TAIL_BYTES)
        if limit == 0:
            return b""
        with _io_errors("reading logs"):
            return await asyncio.to_thread(_store.read_tail, paths.log, limit)

    async def close(self) -> None:
        """Stop following jobs and release them; running jobs keep running."""
        if self._closed:
            return
        self._closed = True
        tasks = [job.task for job in self._jobs.values() if job.task is not None]
        for task in tasks:
            task.cancel()
        # Cancelled watchers release their jobs; their results are moot.
        await asyncio.gather(*tasks, return_exceptions=True)
        # A watcher cancelled before its first step never ran its cleanup.
        for job in list(self._jobs.values()):
            self._release(job)

    # -- beyond the protocol --------------------------------------------------------------

    async def resume(self) -> list[str]:
        """Take over every unfinished job under ``root`` that no live process follows.

        Call it at start-up so max runtimes are enforced and finished jobs recorded even
        before anyone asks for their status. Returns the ids taken over or settled.
        """
        self._check_open()
        if not self._root.is_dir():
            return []
        with os.scandir(self._root) as entries:
            names = sorted(e.name for e in entries if e.is_dir())
        taken: list[str] = []
        for name in names:
            # Claims in progress (".claim-*") and anything else that is no job are skipped.
            if name in self._jobs or WORKLOAD_ID_PATTERN.fullmatch(name) is None:
                continue
            paths = self._paths(name)
            try:
                record = _store.read_record(paths)
                if record is None or record.state.is_final:
                    continue
                with _io_errors("resume"):
                    if self._adopt(paths) is not None or _is_final(paths):
                        taken.append(name)
            except BackendError as exc:
                # One bad directory must not keep the others from being resumed.
                _LOG.warning("skipping %s while resuming: %s", name, exc)
        return taken

    # -- submission -----------------------------------------------------------------------

    def _claim(self, job: JobSpec, paths: JobPaths) -> int | None:
        """Create the job's directory with a pending record; the owner lock's fd, or None.

        The directory is prepared under a temporary name and renamed into place: rename()
        refuses a non-empty target, so of racing submissions exactly one wins.
        """
        try:
            self._root.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".claim-{job.workload_id}-", dir=self._root))
        except OSError as exc:
            raise BackendError(f"cannot create job directory: {exc.strerror}") from exc
        tmp_paths = JobPaths(tmp)
        lock_fd: int | None = None
        claimed = False
        try:
            record = Record(
                workload_id=job.workload_id,
                state=JobState.PENDING,
                submitted_at=datetime.now(UTC),
                max_runtime_seconds=job.max_runtime_seconds,
                message="submitted",
            )
            _store.write_record(tmp_paths, record)
            lock_fd = _store.lock_file(tmp_paths.lock)
            os.rename(tmp, paths.dir)
            claimed = True
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                return None
            raise BackendError(f"cannot create job directory: {exc.strerror}") from exc
        finally:
            if not claimed:
                if lock_fd is not None:
                    os.close(lock_fd)
                shutil.rmtree(tmp, ignore_errors=True)
        return lock_fd

    def _start(self, job: JobSpec, paths: JobPaths, lock_fd: int) -> None:
        """Spawn the supervisor and start following it; a failure to start fails the job."""
        record = _store.read_record(paths)
        assert record is not None  # just claimed, and only the lock holder writes it
        if _store.read_stop(paths) is not None:
            # Cancelled by another process between the claim and now.
            try:
                self._settle(paths, record, vanished=_NEVER_STARTED_MESSAGE)
            finally:
                os.close(lock_fd)
            return
        try:
            prepared = self._sandbox.prepare(job, paths)
            try:
                pid = self._sandbox.spawn(paths, prepared)
            finally:
                # The supervisor holds its own copy of the uid's lock from now on.
                if prepared.lock_fd >= 0:
                    os.close(prepared.lock_fd)
        except (OSError, BackendError) as exc:
            with contextlib.suppress(OSError):
                self._sandbox.release(job.workload_id)  # a cgroup made for nothing
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            failed = replace(
                record,
                state=JobState.FAILED,
                finished_at=datetime.now(UTC),
                message=f"could not start the job: {reason}",
            )
            try:
                _store.write_record(paths, failed)
            finally:
                os.close(lock_fd)
            return
        started_at = datetime.now(UTC)
        running = replace(
            record,
            state=JobState.RUNNING,
            started_at=started_at,
            message="running",
            pid=pid,
            # The supervisor is our unreaped child, so its /proc entry exists at least as a
            # zombie; -1 (never a real start time) only if /proc is unusable.
            pid_start_ticks=_or_invalid(start_ticks(pid)),
        )
        # Follow first: if recording fails below, the job is still watched and settled.
        self._follow(paths, running, lock_fd)
        try:
            _store.write_record(paths, running)
        except OSError as exc:
            raise BackendError(f"job started but not recorded: {exc.strerror}") from exc

    # -- following ------------------------------------------------------------------------

    def _follow(self, paths: JobPaths, record: Record, lock_fd: int) -> _Job:
        assert record.pid is not None and record.pid_start_ticks is not None
        assert record.deadline is not None
        job = _Job(
            paths=paths,
            workload_id=record.workload_id,
            pid=record.pid,
            ticks=record.pid_start_ticks,
            deadline=record.deadline,
            max_runtime_seconds=record.max_runtime_seconds,
            lock_fd=lock_fd,
        )
        self._jobs[job.workload_id] = job
        job.task = asyncio.get_running_loop().create_task(
            self._watch(job), name=f"ignara-local-job-{job.workload_id}"
        )
        return job

    async def _watch(self, job: _Job) -> None:
        try:
            await self._until_exit(job)
            # Before the final record, so that a job seen final has its cgroups gone too.
            await asyncio.to_thread(self._sandbox.release, job.workload_id, RELEASE_SECONDS)
            record = _store.read_record(job.paths)
            if record is not None and not record.state.is_final:
                self._settle(job.paths, record, vanished=_VANISHED_MESSAGE)
        except (OSError, BackendError):
            # The lock is released below, so the next status() or resume() retries this.
            _LOG.exception("could not record the end of local job %s", job.workload_id)
        finally:
            self._release(job)

    def _release(self, job: _Job) -> None:
        """Stop owning ``job``: forget it and drop its lock (idempotent)."""
        self._jobs.pop(job.workload_id, None)
        if job.lock_fd >= 0:
            os.close(job.lock_fd)
            job.lock_fd = -1
        job.finished.set()

    async def _until_exit(self, job: _Job) -> None:
        if _store.read_stop(job.paths) is not None:
            # Taken over half-stopped: finish stopping it.
            await self._terminate(job.pid, job.ticks)
        while process_alive(job.pid, job.ticks):
            remaining = job.remaining()
            if remaining <= 0:
                message = f"exceeded max runtime of {job.max_runtime_seconds} s"
                _store.request_stop(job.paths, StopRequest(JobState.FAILED, message))
                await self._terminate(job.pid, job.ticks)
                return
            await asyncio.sleep(min(self._poll, remaining))

    def _adopt(self, paths: JobPaths) -> _Job | None:
        """Follow an unfinished job nobody follows, or settle it if its process is gone.

        Returns the job if it is now followed here; ``None`` if another live process follows
        it or it is (now) final.
        """
        lock_fd = _store.lock_file(paths.lock)
        if lock_fd is None:
            return None
        try:
            record = _store.read_record(paths)
            if record is None or record.state.is_final:
                return None
            if (
                record.pid is not None
                and record.pid_start_ticks is not None
                and record.deadline is not None
                and process_alive(record.pid, record.pid_start_ticks)
            ):
                job = self._follow(paths, record, lock_fd)
                lock_fd = None  # the watcher owns it now
                return job
            vanished = _NEVER_STARTED_MESSAGE if record.pid is None else LOST_MESSAGE
            self._settle(paths, record, vanished=vanished)
            # Its processes are long gone: no need to wait for its cgroups to empty.
            self._sandbox.release(paths.dir.name)
            return None
        finally:
            if lock_fd is not None:
                os.close(lock_fd)

    def _settle(self, paths: JobPaths, record: Record, *, vanished: str) -> Record:
        final = _final_record(record, _store.read_exit(paths), _store.read_stop(paths), vanished)
        _store.write_record(paths, final)
        return final

    # -- stopping -------------------------------------------------------------------------

    async def _cancel_followed(self, job: _Job) -> None:
        if process_alive(job.pid, job.ticks):
            _store.request_stop(job.paths, StopRequest(JobState.CANCELLED, CANCELLED_MESSAGE))
            await self._terminate(job.pid, job.ticks)
        # The watcher notices the exit within one poll and records the final state.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(job.finished.wait(), self._poll * 2 + _KILL_WAIT_SECONDS)

    async def _cancel_elsewhere(self, workload_id: str, paths: JobPaths, record: Record) -> None:
        """Cancel a job another live process follows: signal it, let its owner record it."""
        _store.request_stop(paths, StopRequest(JobState.CANCELLED, CANCELLED_MESSAGE))
        if record.pid is not None and record.pid_start_ticks is not None:
            await self._terminate(record.pid, record.pid_start_ticks)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._poll * 2 + _KILL_WAIT_SECONDS
        while loop.time() < give_up:
            if (await self.status(workload_id)).state.is_final:
                return
            await asyncio.sleep(self._poll)

    async def _terminate(self, pid: int, ticks: int) -> None:
        """SIGTERM the job's process group, SIGKILL it after the grace period."""
        if not signal_group(pid, ticks, signal.SIGTERM):
            return
        if await self._wait_gone(pid, ticks, self._grace):
            return
        signal_group(pid, ticks, signal.SIGKILL)
        await self._wait_gone(pid, ticks, _KILL_WAIT_SECONDS)

    async def _wait_gone(self, pid: int, ticks: int, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + timeout
        # Finer than the watcher's poll: a stop should return as soon as the job is gone.
        step = min(self._poll, 0.05)
        while process_alive(pid, ticks):
            left = give_up - loop.time()
            if left <= 0:
                return False
            await asyncio.sleep(min(step, left))
        return True

    # -- helpers --------------------------------------------------------------------------

    def _paths(self, workload_id: str) -> JobPaths:
        return JobPaths(self._root / validate_workload_id(workload_id))

    def _check_open(self) -> None:
        if self._closed:
            raise BackendClosedError()


@contextlib.contextmanager
def _io_errors(action: str) -> Iterator[None]:
    """Report a filesystem failure under the root as a ``BackendError`` naming the action."""
    try:
        yield
    except OSError as exc:
        raise BackendError(f"local backend: {action} failed: {exc.strerror or exc}") from exc


def _or_invalid(ticks: int | None) -> int:
    return -1 if ticks is None else ticks


def _is_final(paths: JobPaths) -> bool:
    record = _store.read_record(paths)
    return record is not None and record.state.is_final


def _describe_exit(exit_code: int) -> str:
    if exit_code >= 0:
        return f"exited with code {exit_code}"
    try:
        name = signal.Signals(-exit_code).name
    except ValueError:
        name = str(-exit_code)
    return f"killed by signal {name}"


def _final_record(
    record: Record, exit_record: ExitRecord | None, stop: StopRequest | None, vanished: str
) -> Record:
    """The final record of a job whose process is gone.

    A stop request decides the state (cancel or timeout); else the supervisor's exit record;
    with neither, the job failed for the reason ``vanished`` gives.
    """
    exit_code = exit_record.exit_code if exit_record is not None else None
    if stop is not None:
        state, message = stop.state, stop.message
    elif exit_record is None:
        state, message = JobState.FAILED, vanished
    elif exit_record.error is not None:
        state, message = JobState.FAILED, exit_record.error
    elif exit_code == 0:
        state, message = JobState.SUCCEEDED, _describe_exit(0)
    else:
        state = JobState.FAILED
        message = "exit status unknown" if exit_code is None else _describe_exit(exit_code)
    finished_at = exit_record.finished_at if exit_record is not None else None
    return replace(
        record,
        state=state,
        exit_code=exit_code,
        finished_at=finished_at or datetime.now(UTC),
        message=message,
    )
