"""slurmrestd's wire shapes, one class per API version (only here: a newer version is
a new class in ``WIRE_FORMATS``, not a rewrite of the adapter).

What the adapter needs from any version: where to submit, list, read and cancel jobs; the
submit body for a :class:`JobRequest`; and from the answers, job ids, :class:`JobRecord`
and the error list. Answers are network input: decoded into typed structs, unknown
fields ignored, a malformed body is a :class:`WireError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

__all__ = [
    "V0038",
    "WIRE_FORMATS",
    "ApiError",
    "JobRecord",
    "JobRequest",
    "WireError",
    "WireFormat",
]


class WireError(ValueError):
    """slurmrestd answered with a body of the wrong shape."""


@dataclass(frozen=True)
class JobRequest:
    """One Slurm batch job, as the adapter means it (independent of the API version)."""

    name: str
    script: str
    environment: Mapping[str, str]
    working_directory: str
    standard_output: str
    tasks: int
    cpus_per_task: int
    time_limit_minutes: int
    gpus_per_task: int = 0
    memory_per_cpu_mb: int | None = None
    partition: str = ""
    account: str = ""
    comment: str = ""
    # From the workload's own ``slurm`` section (options.SlurmOptions); None: not asked.
    constraints: str | None = None
    qos: str | None = None
    exclusive: bool | None = None
    time_minimum_minutes: int | None = None
    nice: int | None = None
    reservation: str | None = None


@dataclass(frozen=True)
class JobRecord:
    """A job as slurmctld reports it. Times are epoch seconds (0: not yet); ``exit_code`` is
    the raw wait status (``None``: not reported)."""

    job_id: int
    name: str
    state: str
    reason: str = ""
    start_time: int = 0
    end_time: int = 0
    exit_code: int | None = None


@dataclass(frozen=True)
class ApiError:
    """One entry of an answer's ``errors``: Slurm's error number and its words."""

    number: int | None
    message: str


class WireFormat(Protocol):
    version: str

    def ping_path(self) -> str: ...

    def submit_path(self) -> str: ...

    def jobs_path(self) -> str: ...

    def job_path(self, job_id: int) -> str: ...

    def submit_body(self, request: JobRequest) -> dict[str, Any]: ...

    def submitted_job_id(self, body: bytes) -> int: ...

    def job_records(self, body: bytes) -> list[JobRecord]: ...

    def errors(self, body: bytes) -> list[ApiError]: ...


class _Error38(msgspec.Struct):
    error: str = ""
    error_number: int | None = None
    error_code: int | None = None  # some 22.05 paths spell it so
    description: str = ""


class _Job38(msgspec.Struct):
    job_id: int
    name: str = ""
    job_state: str = ""
    state_reason: str = ""
    start_time: int = 0
    end_time: int = 0
    exit_code: int | None = None


class _Jobs38(msgspec.Struct):
    jobs: list[_Job38] = []


class _Submit38(msgspec.Struct):
    job_id: int | None = None


class _Errors38(msgspec.Struct):
    errors: list[_Error38] = []


def _decode(body: bytes, shape: type[Any]) -> Any:
    try:
        return msgspec.json.decode(body, type=shape)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise WireError(f"slurmrestd answered a body this adapter cannot read: {err}") from None


class V0038:
    """Slurm 22.05's ``/slurm/v0.0.38`` (shared/notes/backends.md §1 has the measured shapes).

    Pitfalls it handles: ``environment`` is required (else error 2127); the GPU count is a
    string (``gpus_per_task: "1"``); ``time_limit`` is in minutes; ``exit_code`` is the raw
    wait status.
    """

    version = "v0.0.38"
    _base = "/slurm/v0.0.38"

    def ping_path(self) -> str:
        return f"{self._base}/ping"

    def submit_path(self) -> str:
        return f"{self._base}/job/submit"

    def jobs_path(self) -> str:
        return f"{self._base}/jobs"

    def job_path(self, job_id: int) -> str:
        return f"{self._base}/job/{int(job_id)}"

    def submit_body(self, request: JobRequest) -> dict[str, Any]:
        job: dict[str, Any] = {
            "name": request.name,
            "environment": dict(request.environment),
            "current_working_directory": request.working_directory,
            "standard_output": request.standard_output,
            "tasks": request.tasks,
            "cpus_per_task": request.cpus_per_task,
            "time_limit": request.time_limit_minutes,
            "requeue": False,  # a preempted or failed job comes back through the gateway
        }
        if request.gpus_per_task:
            job["gpus_per_task"] = str(request.gpus_per_task)
        if request.memory_per_cpu_mb is not None:
            job["memory_per_cpu"] = request.memory_per_cpu_mb
        if request.partition:
            job["partition"] = request.partition
        if request.account:
            job["account"] = request.account
        if request.comment:
            job["comment"] = request.comment
        if request.constraints is not None:
            job["constraints"] = request.constraints
        if request.qos is not None:
            job["qos"] = request.qos
        if request.exclusive:
            # 0.0.38 parses sbatch's words ("exclusive", "user", "mcs", "oversubscribe"),
            # not a boolean; not exclusive is Slurm's default, so False sends nothing.
            job["exclusive"] = "exclusive"
        if request.time_minimum_minutes is not None:
            job["time_minimum"] = request.time_minimum_minutes
        if request.nice is not None:
            job["nice"] = request.nice
        if request.reservation is not None:
            job["reservation"] = request.reservation
        return {"script": request.script, "job": job}

    def submitted_job_id(self, body: bytes) -> int:
        job_id = _decode(body, _Submit38).job_id
        if job_id is None:
            raise WireError("slurmrestd accepted the job but named no job_id")
        return int(job_id)

    def job_records(self, body: bytes) -> list[JobRecord]:
        return [
            JobRecord(
                job_id=j.job_id,
                name=j.name,
                state=j.job_state,
                reason=j.state_reason,
                start_time=j.start_time,
                end_time=j.end_time,
                exit_code=j.exit_code,
            )
            for j in _decode(body, _Jobs38).jobs
        ]

    def errors(self, body: bytes) -> list[ApiError]:
        try:
            entries = msgspec.json.decode(body, type=_Errors38).errors
        except (msgspec.DecodeError, msgspec.ValidationError):
            return []  # a text error (401, 400 "Unable to parse query"): the status says it
        return [
            ApiError(
                e.error_number if e.error_number is not None else e.error_code,
                e.description or e.error,
            )
            for e in entries
        ]


WIRE_FORMATS: dict[str, WireFormat] = {V0038.version: V0038()}
"""Every API version the adapter speaks, by the name slurmrestd serves it under."""
