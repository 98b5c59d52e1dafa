"""From the gateway's job to a Ray job request, and from Ray's job info to a JobStatus:
pure functions, so the whole mapping is tested by tables (tests/ray/test_ray_mapping.py).

A gang is one Ray job: its entrypoint gets the gang's *total* GPUs, CPUs and memory
(``entrypoint_num_gpus`` etc.), which Ray reserves for the driver while it runs. The
workload's ``ray`` section (options.py) adds runtime_env pieces, custom resources and
metadata.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from gateway.backends.base import JobSpec, JobState, JobStatus
from gateway.backends.ray.options import RESERVED_RESOURCES, RayOptions

__all__ = [
    "KILL_AFTER_SECONDS",
    "LOST_ERROR_TYPES",
    "TIMED_OUT",
    "RayJobInfo",
    "RayJobRequest",
    "job_request",
    "job_status",
    "read_job_info",
]

_MAX_MESSAGE = 500
KILL_AFTER_SECONDS = 30
TIMED_OUT = 124  # coreutils timeout's exit status when the limit ran out

# Ray's job states -> the gateway's. Anything else is reported as running while it lasts
# (a new word must not end a job the gateway cannot see ended).
_STATES: dict[str, JobState] = {
    "PENDING": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "STOPPED": JobState.CANCELLED,
    "SUCCEEDED": JobState.SUCCEEDED,
    "FAILED": JobState.FAILED,
}
# Ray's error types of a FAILED job that say Ray's own machinery failed, not the job: its
# supervisor actor died (with the head or its worker) or could not be found again (a head
# restarted with its job table, as with GCS fault tolerance). Such a job did not finish; the
# gateway runs it again. The job's own failures (its runtime env, its command's start or
# exit) and Ray giving up on placing it (start timeout, unschedulable: the same would happen
# again) stay failures.
LOST_ERROR_TYPES = frozenset({"JOB_SUPERVISOR_ACTOR_DIED", "JOB_SUPERVISOR_ACTOR_START_FAILURE"})


@dataclass(frozen=True)
class RayJobRequest:
    """The body of ``POST /api/jobs/``."""

    submission_id: str
    entrypoint: str
    env_vars: Mapping[str, str]
    metadata: Mapping[str, str]
    num_gpus: int = 0
    num_cpus: float | None = None
    memory_bytes: int | None = None
    resources: Mapping[str, float] = field(default_factory=dict)
    # runtime_env pieces beside env_vars (the workload's ``ray`` section).
    runtime_env: Mapping[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "submission_id": self.submission_id,
            "entrypoint": self.entrypoint,
            "runtime_env": {**self.runtime_env, "env_vars": dict(self.env_vars)},
            "metadata": dict(self.metadata),
        }
        if self.num_gpus:
            body["entrypoint_num_gpus"] = self.num_gpus
        if self.num_cpus is not None:
            body["entrypoint_num_cpus"] = self.num_cpus
        if self.memory_bytes is not None:
            body["entrypoint_memory"] = self.memory_bytes
        if self.resources:
            body["entrypoint_resources"] = dict(self.resources)
        return body


def job_request(spec: JobSpec) -> RayJobRequest:
    """The Ray job for ``spec``. The entrypoint is run by a shell on Ray's side, so the
    command is quoted word by word and ``exec``-ed: no word is read as shell syntax, and
    Ray's stop signals reach the command itself. Ray has no time limit of its own: the
    command runs under coreutils ``timeout`` (SIGTERM at the max runtime, SIGKILL
    ``KILL_AFTER_SECONDS`` later; exit code 124)."""
    gpus = sum(p.count * p.gpus for p in spec.pods)
    cpu_millis = spec.limits.cpu_millis
    names = {
        "job": spec.workload_id,
        "workload": spec.workload_id.rsplit("-", 1)[0],  # the dispatcher's <workload>-<attempt>
        "tenant": spec.tenant,
        "queue": spec.queue,
    }
    # Validated by the API before it was stored; converted again, as any stored input.
    asked = msgspec.convert(spec.options.get("ray", {}), RayOptions)
    metadata = {
        **(asked.metadata or {}),
        **{f"ignara.{k}": v for k, v in names.items() if v},  # the gateway's keys win
    }
    limit = f"timeout --kill-after={KILL_AFTER_SECONDS} {spec.max_runtime_seconds}"
    return RayJobRequest(
        submission_id=spec.workload_id,
        entrypoint=f"exec {limit} {shlex.join(spec.command)}",
        env_vars={**spec.env, "IGNARA_JOB": spec.workload_id},
        metadata=metadata,
        num_gpus=gpus,
        num_cpus=None if cpu_millis is None else cpu_millis / 1000,
        memory_bytes=spec.limits.memory_bytes,
        resources={
            k: v
            for k, v in (asked.entrypoint_resources or {}).items()
            if k not in RESERVED_RESOURCES  # the gang's requests set those
        },
        runtime_env=asked.runtime_env(),
    )


@dataclass(frozen=True)
class RayJobInfo:
    """What the adapter reads of ``GET /api/jobs/{id}``."""

    submission_id: str
    status: str
    message: str = ""
    end_time_ms: int | None = None
    driver_exit_code: int | None = None
    error_type: str = ""


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_job_info(body: object) -> RayJobInfo | None:
    """Ray's job info, or ``None`` when it is not the shape Ray documents."""
    if not isinstance(body, dict):
        return None
    submission_id, status = body.get("submission_id"), body.get("status")
    if not isinstance(submission_id, str) or not isinstance(status, str):
        return None
    message, error_type = body.get("message"), body.get("error_type")
    return RayJobInfo(
        submission_id=submission_id,
        status=status.upper(),
        message=message if isinstance(message, str) else "",
        end_time_ms=_int(body.get("end_time")),
        driver_exit_code=_int(body.get("driver_exit_code")),
        error_type=error_type.upper() if isinstance(error_type, str) else "",
    )


def _time(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, UTC) if ms else None


def _message(text: str) -> str:
    # Ray's message for a failed job may quote the job's last log lines: keep it bounded.
    return " ".join(text.split())[:_MAX_MESSAGE]


def job_status(info: RayJobInfo, started_at: datetime | None = None) -> JobStatus:
    """The gateway's view of a Ray job. ``started_at`` is the gateway's own observation of
    the job starting to run: Ray's ``start_time`` is when it was *submitted*."""
    state = _STATES.get(info.status, JobState.RUNNING)
    if state is JobState.FAILED and info.error_type in LOST_ERROR_TYPES:
        state = JobState.LOST
    exit_code = info.driver_exit_code if state.is_final else None
    if state is JobState.PENDING:
        message = f"pending on Ray: {_message(info.message)}" if info.message else "pending on Ray"
    elif state is JobState.FAILED and exit_code == TIMED_OUT:
        message = "ended at its max runtime (exit code 124 from timeout)"
    elif state is JobState.FAILED:
        message = _message(info.message) or f"exited with code {exit_code}"
    elif state is JobState.LOST:
        said = _message(info.message)
        message = f"Ray lost the job ({info.error_type}){f': {said}' if said else ''}"
    elif state is JobState.CANCELLED:
        message = "stopped on Ray"
    else:
        message = ""
    return JobStatus(
        state=state,
        exit_code=exit_code,
        started_at=started_at,
        finished_at=_time(info.end_time_ms) if state.is_final else None,
        message=message,
        backend_job_id=info.submission_id,
        backend_state=info.status,
    )
