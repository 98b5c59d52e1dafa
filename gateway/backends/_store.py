"""The local backend's on-disk records: one directory per workload under the backend's root.

Layout of ``ROOT/<workload id>/`` and who writes what (one writer per file, so no file is
ever read-modified-written by two processes)::

    status.json   the job's record (format below)      the owner: the process holding owner.lock
    owner.lock    flock()ed by the process following the job; the kernel frees it when that
                  process dies, which is how a restarted gateway knows a job is orphaned
    stop.json     a stop request {"state", "message"}   whoever stops it first (cancel, timeout)
    launch.json   the supervisor's plan (0600)         the gateway; the supervisor deletes it
    exit.json     {"exit_code", "error", "finished_at"} the job's supervisor (``_supervisor``)
    output.log    the job's stdout and stderr, appended
    work/         the job's working directory and HOME (``/home/job`` in the sandbox)
    tmp/          the job's /tmp in the sandbox
    rootfs/       empty: the sandbox mounts its root there, in its own mount namespace

The directory is 0700 and owned by the gateway; with per-job uids, ``work/`` and ``tmp/``
belong to the job's uid. A sandboxed job sees only ``work/`` and ``tmp/``, nothing else here.

``status.json`` (version 1)::

    {"version": 1, "workload_id": "wl-1", "state": "running", "exit_code": null,
     "submitted_at": "2025-01-01T00:00:00+00:00", "started_at": "...", "finished_at": null,
     "message": "running", "max_runtime_seconds": 3600,
     "pid": 1234, "pid_start_ticks": 987654}

``pid`` is the supervisor's (the leader of the job's process group) and ``pid_start_ticks``
its start time from ``/proc/<pid>/stat``, so a reused pid is never mistaken for the job.
Every file is replaced atomically (temporary file, fsync, rename).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

from gateway.backends._supervisor.plan import EXIT_RECORD, ROOTFS, TMP, WORK
from gateway.backends.base import BackendStateError, JobState, JobStatus

__all__ = [
    "ExitRecord",
    "JobPaths",
    "Record",
    "StopRequest",
    "lock_file",
    "read_exit",
    "read_record",
    "read_stop",
    "read_tail",
    "request_stop",
    "write_json_atomic",
    "write_record",
]

_VERSION = 1
_T = TypeVar("_T")


@dataclass(frozen=True)
class JobPaths:
    """Where one workload's files live."""

    dir: Path

    @property
    def status(self) -> Path:
        return self.dir / "status.json"

    @property
    def lock(self) -> Path:
        return self.dir / "owner.lock"

    @property
    def stop(self) -> Path:
        return self.dir / "stop.json"

    @property
    def exit(self) -> Path:
        return self.dir / EXIT_RECORD

    @property
    def log(self) -> Path:
        return self.dir / "output.log"

    @property
    def work(self) -> Path:
        return self.dir / WORK

    @property
    def tmp(self) -> Path:
        return self.dir / TMP

    @property
    def rootfs(self) -> Path:
        return self.dir / ROOTFS


@dataclass(frozen=True)
class Record:
    """What ``status.json`` holds."""

    workload_id: str
    state: JobState
    submitted_at: datetime
    max_runtime_seconds: int
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    message: str = ""
    pid: int | None = None
    pid_start_ticks: int | None = None

    @property
    def deadline(self) -> datetime | None:
        if self.started_at is None:
            return None
        return self.started_at + timedelta(seconds=self.max_runtime_seconds)

    def to_status(self) -> JobStatus:
        return JobStatus(
            state=self.state,
            exit_code=self.exit_code,
            started_at=self.started_at,
            finished_at=self.finished_at,
            message=self.message,
        )

    def to_json(self) -> dict[str, object]:
        return {
            "version": _VERSION,
            "workload_id": self.workload_id,
            "state": self.state.value,
            "exit_code": self.exit_code,
            "submitted_at": self.submitted_at.isoformat(),
            "started_at": _iso(self.started_at),
            "finished_at": _iso(self.finished_at),
            "message": self.message,
            "max_runtime_seconds": self.max_runtime_seconds,
            "pid": self.pid,
            "pid_start_ticks": self.pid_start_ticks,
        }

    @classmethod
    def from_json(cls, data: object) -> Record:
        """Parse a ``status.json`` document; raises ``BackendStateError`` if it is not one."""
        if not isinstance(data, dict) or data.get("version") != _VERSION:
            raise BackendStateError("status record is not a version 1 object")
        try:
            state = JobState(_field(data, "state", str) or "")
        except ValueError as exc:
            raise BackendStateError("status record has an unknown state") from exc
        submitted_at = _time(data, "submitted_at")
        runtime = _field(data, "max_runtime_seconds", int)
        if submitted_at is None or runtime is None or state is JobState.UNKNOWN:
            raise BackendStateError("status record lacks its submission time or runtime")
        return cls(
            workload_id=_field(data, "workload_id", str) or "",
            state=state,
            submitted_at=submitted_at,
            max_runtime_seconds=runtime,
            started_at=_time(data, "started_at"),
            finished_at=_time(data, "finished_at"),
            exit_code=_field(data, "exit_code", int),
            message=_field(data, "message", str) or "",
            pid=_field(data, "pid", int),
            pid_start_ticks=_field(data, "pid_start_ticks", int),
        )


@dataclass(frozen=True)
class ExitRecord:
    """What the supervisor wrote when the command ended (or could not start)."""

    exit_code: int | None
    error: str | None
    finished_at: datetime | None


@dataclass(frozen=True)
class StopRequest:
    """Why the job is being stopped, and the final state that follows."""

    state: JobState
    message: str


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _field(data: dict[str, object], key: str, kind: type[_T]) -> _T | None:
    value = data.get(key)
    # bool is an int subclass; a true/false where a number belongs is corruption.
    if value is None or (isinstance(value, kind) and not isinstance(value, bool)):
        return value
    raise BackendStateError(f"record field {key!r} has the wrong type")


def _time(data: dict[str, object], key: str) -> datetime | None:
    text = _field(data, key, str)
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:
        raise BackendStateError(f"record field {key!r} is not a timestamp") from exc


def _load_json(path: Path) -> object:
    """The parsed file, or ``None`` if it does not exist; ``BackendStateError`` if unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BackendStateError(f"cannot read {path.name}: {exc.strerror}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise BackendStateError(f"{path.name} is not valid JSON") from exc


def write_json_atomic(path: Path, data: dict[str, object]) -> None:
    """Replace ``path`` with ``data`` so a reader sees the old or the new file, never a part."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as out:
            json.dump(data, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_record(paths: JobPaths) -> Record | None:
    """The job's record, or ``None`` if no job of that id was ever claimed."""
    data = _load_json(paths.status)
    if data is None:
        if paths.dir.exists():
            raise BackendStateError("the job's directory has no status record")
        return None
    return Record.from_json(data)


def write_record(paths: JobPaths, record: Record) -> None:
    write_json_atomic(paths.status, record.to_json())


def read_exit(paths: JobPaths) -> ExitRecord | None:
    """The supervisor's exit record, or ``None`` if it wrote none (or an unreadable one)."""
    try:
        data = _load_json(paths.exit)
        if not isinstance(data, dict):
            return None
        return ExitRecord(
            exit_code=_field(data, "exit_code", int),
            error=_field(data, "error", str),
            finished_at=_time(data, "finished_at"),
        )
    except BackendStateError:
        # Treated like no record: the job's own outcome is then unknown, which is reported.
        return None


def read_stop(paths: JobPaths) -> StopRequest | None:
    try:
        data = _load_json(paths.stop)
        if not isinstance(data, dict):
            return None
        state = JobState(_field(data, "state", str) or "")
        return StopRequest(state=state, message=_field(data, "message", str) or "")
    except (BackendStateError, ValueError):
        return None


def request_stop(paths: JobPaths, request: StopRequest) -> StopRequest:
    """Record a stop request unless one exists; return the one that holds (first wins)."""
    tmp = paths.dir / f".stop.{secrets.token_hex(6)}.tmp"
    data = {"state": request.state.value, "message": request.message}
    try:
        tmp.write_text(json.dumps(data), encoding="utf-8")
        # link() fails if the target exists, which makes the first request the one that counts.
        os.link(tmp, paths.stop)
    except FileExistsError:
        return read_stop(paths) or request
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return request


def lock_file(path: Path) -> int | None:
    """An fd holding an exclusive flock on ``path``, or ``None`` if another holder has it.

    flock() locks belong to the open file, so a second open in the same process conflicts
    too, and the kernel drops the lock when its holder dies. Close the fd to unlock.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        os.close(fd)
        raise
    return fd


def read_tail(path: Path, max_bytes: int) -> bytes:
    """At most the last ``max_bytes`` of ``path``; nothing if it does not exist."""
    try:
        with path.open("rb") as log:
            size = log.seek(0, os.SEEK_END)
            log.seek(max(0, size - max_bytes))
            return log.read(max_bytes)
    except FileNotFoundError:
        return b""
