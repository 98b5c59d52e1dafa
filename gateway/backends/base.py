"""What every backend speaks: the job spec, its states, its status, the protocol and the errors.

The dispatcher names each backend job by its workload id, so submission is idempotent: a
second ``submit`` of an id that already exists does nothing, whatever its spec says.

Errors (each with a stable ``code`` for the JSON error body)::

    BackendError                 base; the backend could not do what was asked
     +-- InvalidWorkloadIdError  invalid_workload_id: not a safe name ([a-z0-9-]{1,64})
     +-- InvalidJobError         invalid_job: a malformed spec (empty command, NUL bytes,
     |                           bad environment names, max runtime out of range)
     +-- BackendStateError       backend_state_corrupt: the backend's own records are unreadable
     +-- BackendClosedError      backend_closed: used after ``close()``
     +-- JobRefusedError         backend_refuses_jobs: the backend runs no jobs at all here
     |                           (the local backend, when it cannot isolate them)
     +-- JobRejectedError        job_rejected: the backend will never run this job (e.g. it
     |                           asks for more than any node has); the workload fails
     +-- BackendUnavailableError backend_unavailable: the backend did not answer, or refused
                                 the gateway's credentials; the workload waits and is retried

Where a bad job is reported: a spec whose *shape* is wrong cannot be built at all
(``JobSpec`` raises ``InvalidJobError``; the API layer turns that into a 4xx before anything is
admitted). A job whose problem only shows when it runs on the backend's host (its command is
not found or not executable there) is accepted and then reported as ``failed`` with a message
saying why, so the tracker releases its quota like for any other failed job.

A backend that cannot run tenants' jobs safely says so before anything is submitted: its
``refusal()`` (see ``refusal_of``) gives the reason, the API answers 409 with it, and its
``submit`` raises ``JobRefusedError``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "FINAL_STATES",
    "MAX_RUNTIME_SECONDS",
    "WORKLOAD_ID_PATTERN",
    "Backend",
    "BackendClosedError",
    "BackendError",
    "BackendStateError",
    "BackendUnavailableError",
    "Identifying",
    "InvalidJobError",
    "InvalidWorkloadIdError",
    "JobLimits",
    "JobRefusedError",
    "JobRejectedError",
    "JobSpec",
    "JobState",
    "JobStatus",
    "PassScoped",
    "PodShape",
    "refusal_of",
    "validate_workload_id",
]

WORKLOAD_ID_PATTERN = re.compile(r"[a-z0-9-]{1,64}")
"""A workload id is a safe path component and job name on every backend."""

# Ten years: far beyond any real run, small enough that deadline arithmetic cannot overflow.
MAX_RUNTIME_SECONDS = 10 * 366 * 24 * 3600
# Far beyond any machine (an exbibyte, a million cores), small enough for every kernel file.
_MAX_MEMORY_BYTES = 2**60
_MAX_CPU_MILLIS = 10**9


class BackendError(Exception):
    """The backend could not do what was asked."""

    code: str = "backend_error"


class InvalidWorkloadIdError(BackendError):
    """A workload id is not a safe name: it must match ``[a-z0-9-]{1,64}``."""

    code = "invalid_workload_id"

    def __init__(self, workload_id: object) -> None:
        # repr() bounded so a huge or hostile id cannot flood a log line.
        shown = repr(workload_id)[:80]
        super().__init__(f"invalid workload id {shown}: use 1 to 64 of [a-z0-9-]")


class InvalidJobError(BackendError):
    """A job spec is malformed; it was never submitted."""

    code = "invalid_job"


class BackendStateError(BackendError):
    """The backend's own records for a job are unreadable or corrupt."""

    code = "backend_state_corrupt"


class JobRefusedError(BackendError):
    """The backend runs no jobs here (e.g. it cannot isolate them); the message says why."""

    code = "backend_refuses_jobs"


class JobRejectedError(BackendError):
    """The backend refused this job for good (retrying cannot help); the message says why."""

    code = "job_rejected"


class BackendUnavailableError(BackendError):
    """The backend cannot be reached or refused the gateway; retrying later may help."""

    code = "backend_unavailable"


class BackendClosedError(BackendError):
    """The backend was used after ``close()``."""

    code = "backend_closed"

    def __init__(self) -> None:
        super().__init__("the backend is closed")


class JobState(StrEnum):
    """Where a backend job is. ``unknown`` means the backend has no job of that id;
    ``lost`` that the backend still shows the job, ended, but by its own failure, not the
    job's (e.g. Ray's job supervisor died with the head): the job did not finish, and the
    dispatcher runs the workload again, as for an ``unknown`` one."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"
    UNKNOWN = "unknown"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATES


FINAL_STATES: frozenset[JobState] = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.LOST}
)


def validate_workload_id(workload_id: object) -> str:
    """Return ``workload_id`` if it is a safe name, else raise ``InvalidWorkloadIdError``."""
    if not isinstance(workload_id, str) or WORKLOAD_ID_PATTERN.fullmatch(workload_id) is None:
        raise InvalidWorkloadIdError(workload_id)
    return workload_id


@dataclass(frozen=True)
class JobLimits:
    """What one job may use in all: memory in bytes, CPU in thousandths of a core.

    ``None`` means no limit from the job (the backend's own limits still hold). Both are the
    sums of the workload's per-pod requests over its pods. Raises ``InvalidJobError``.
    """

    memory_bytes: int | None = None
    cpu_millis: int | None = None

    def __post_init__(self) -> None:
        _validate_limit("memory_bytes", self.memory_bytes, _MAX_MEMORY_BYTES)
        _validate_limit("cpu_millis", self.cpu_millis, _MAX_CPU_MILLIS)


def _validate_limit(name: str, value: int | None, highest: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= highest:
        raise InvalidJobError(f"{name} must be an integer between 1 and {highest}, or none")


@dataclass(frozen=True)
class PodShape:
    """One pod set of a gang as admitted: ``count`` pods, each asking for ``gpus`` GPUs,
    ``cpu_millis`` thousandths of a core and ``memory_bytes`` (``None``: not asked).

    Schedulers that place a gang as one job (Slurm) need its shape, not only its totals.
    """

    count: int
    gpus: int = 0
    cpu_millis: int | None = None
    memory_bytes: int | None = None
    # The pod set's name and the flavor it was admitted on ("": not known), for backends
    # that place pod sets apart (Kubernetes: one replicated job each, node labels per flavor).
    name: str = ""
    flavor: str = ""

    def __post_init__(self) -> None:
        for name, value, lowest in (("count", self.count, 1), ("gpus", self.gpus, 0)):
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not lowest <= value <= 10**6
            ):
                raise InvalidJobError(f"{name} must be an integer between {lowest} and 1000000")
        _validate_limit("cpu_millis", self.cpu_millis, _MAX_CPU_MILLIS)
        _validate_limit("memory_bytes", self.memory_bytes, _MAX_MEMORY_BYTES)


@dataclass(frozen=True)
class JobSpec:
    """One job to run: a command (no shell), extra environment, a runtime limit and limits.

    Usage::

        JobSpec("wl-42", ("python", "train.py", "--epochs", "3"), {"SEED": "1"}, 3600)
        JobSpec("wl-43", ("python3", "eval.py"), {}, 600, JobLimits(memory_bytes=2**30))

    ``command`` and ``env`` are copied on construction (into a tuple and a read-only mapping),
    so a spec cannot change after it is validated. Raises ``InvalidWorkloadIdError`` or
    ``InvalidJobError``.
    """

    workload_id: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    max_runtime_seconds: int
    limits: JobLimits = JobLimits()
    # The gang's shape (empty: one process, as the local backend runs every job).
    pods: tuple[PodShape, ...] = ()
    # Whose job it is ("": not known), for backends that label their jobs with it.
    tenant: str = ""
    queue: str = ""
    # Backend-specific sections as the API validated them ({"slurm": {"qos": "high"}});
    # each backend reads its own and ignores the others.
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_workload_id(self.workload_id)
        # Frozen: copying needs object.__setattr__; the copies are what gets validated.
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        _validate_command(self.command)
        _validate_env(self.env)
        _validate_runtime(self.max_runtime_seconds)
        if not isinstance(self.limits, JobLimits):
            raise InvalidJobError("limits must be a JobLimits")
        object.__setattr__(self, "pods", tuple(self.pods))
        if not all(isinstance(pod, PodShape) for pod in self.pods):
            raise InvalidJobError("pods must be PodShapes")
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))


def _validate_command(command: tuple[str, ...]) -> None:
    if not command:
        raise InvalidJobError("the command is empty")
    if not all(isinstance(arg, str) for arg in command):
        raise InvalidJobError("every command argument must be a string")
    if not command[0]:
        raise InvalidJobError("the command's program name is empty")
    if any("\0" in arg for arg in command):
        raise InvalidJobError("command arguments must not contain NUL bytes")


def _validate_env(env: Mapping[str, str]) -> None:
    for name, value in env.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidJobError("environment names and values must be strings")
        if not name or "=" in name or "\0" in name:
            raise InvalidJobError(f"invalid environment variable name {name[:64]!r}")
        if "\0" in value:
            raise InvalidJobError(f"environment variable {name[:64]!r} contains a NUL byte")


def _validate_runtime(seconds: int) -> None:
    # bool is an int subclass; True seconds is a bug, not a runtime.
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise InvalidJobError("max_runtime_seconds must be an integer")
    if not 1 <= seconds <= MAX_RUNTIME_SECONDS:
        raise InvalidJobError(f"max_runtime_seconds must be between 1 and {MAX_RUNTIME_SECONDS}")


@dataclass(frozen=True)
class JobStatus:
    """A job's state as the backend last saw it.

    ``exit_code`` is the command's exit status when it exited by itself, ``-N`` when signal
    ``N`` ended it, and ``None`` when it never ran or the backend could not learn it.
    ``backend_job_id`` and ``backend_state`` are the backend's own id and state word for the
    job (e.g. Slurm's ``"4711"`` and ``"PENDING"``), where it has them; ``message`` says why a
    pending job waits (the backend's reason) or why a job ended.
    """

    state: JobState
    exit_code: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    message: str = ""
    backend_job_id: str | None = None
    backend_state: str = ""


@runtime_checkable
class Backend(Protocol):
    """A place that runs jobs. One module per backend implements it.

    Contract:

    - ``submit`` is idempotent: the workload id names the job; submitting an id that already
      exists does nothing (even if the spec differs). It returns ``True`` when it found such
      a job (the dispatcher then records the job as adopted, not dispatched), ``False`` or
      ``None`` (cannot tell) otherwise.
    - ``cancel`` is idempotent: it stops a pending or running job (SIGTERM to the job, then
      SIGKILL after a grace period, or the backend's equivalent) and returns once it is
      stopped; cancelling a finished or unknown job does nothing.
    - ``status`` of an id the backend does not know reports ``JobState.UNKNOWN``; of a job
      the backend ended through a failure of its own (not the job's), ``JobState.LOST``.
    - ``logs`` returns at most ``tail_bytes`` from the end of the job's combined output.
    - ``close`` releases the backend's own resources.
    """

    name: str

    async def submit(self, job: JobSpec) -> bool | None: ...

    async def cancel(self, workload_id: str) -> None: ...

    async def status(self, workload_id: str) -> JobStatus: ...

    async def logs(self, workload_id: str, tail_bytes: int = 65536) -> bytes: ...

    async def close(self) -> None: ...


@runtime_checkable
class Identifying(Protocol):
    """A backend that knows its own id for a job it was just given (e.g. Slurm's job id),
    without asking the scheduler again: ``None`` when it does not."""

    def backend_job_id(self, workload_id: str) -> str | None: ...


@runtime_checkable
class PassScoped(Protocol):
    """A backend that may keep what it learned during one dispatcher pass (e.g. Slurm's job
    list, read once to find jobs by name) and must forget it at the next: the dispatcher
    calls ``begin_pass()`` before it asks the backend anything in a pass."""

    def begin_pass(self) -> None: ...


@runtime_checkable
class Refusing(Protocol):
    """A backend that may refuse every job: ``refusal()`` says why, or is ``None``."""

    def refusal(self) -> str | None: ...


def refusal_of(backend: Backend) -> str | None:
    """Why ``backend`` runs no jobs at all, or ``None`` if it runs them."""
    return backend.refusal() if isinstance(backend, Refusing) else None
