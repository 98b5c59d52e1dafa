"""From the gateway's job to a Slurm job, and from a Slurm job record to a JobStatus:
pure functions, so the whole mapping is tested by tables (tests/backends/slurm/)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePosixPath

import msgspec

from gateway.backends.base import JobSpec, JobState, JobStatus, PodShape
from gateway.backends.slurm.options import SlurmOptions
from gateway.backends.slurm.wire import JobRecord, JobRequest

__all__ = [
    "BASE_PATH",
    "SlurmJobSettings",
    "decode_exit_code",
    "job_request",
    "job_status",
    "output_path",
]

BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
_MIB = 2**20

# Slurm's job states (job_state_string) -> the gateway's. Anything else is reported as
# running while it lasts (Slurm adds states rarely; an unknown one must not end a job).
_STATES: dict[str, JobState] = {
    "PENDING": JobState.PENDING,
    "REQUEUED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING,
    "CONFIGURING": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "COMPLETING": JobState.RUNNING,
    "SUSPENDED": JobState.RUNNING,
    "STOPPED": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "COMPLETED": JobState.SUCCEEDED,
    "CANCELLED": JobState.CANCELLED,
    "FAILED": JobState.FAILED,
    "TIMEOUT": JobState.FAILED,
    "NODE_FAIL": JobState.FAILED,
    "PREEMPTED": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    "DEADLINE": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
}
_ENDED_BECAUSE = {
    "TIMEOUT": "Slurm ended the job at its time limit",
    "NODE_FAIL": "a node of the job failed",
    "PREEMPTED": "Slurm preempted the job",
    "BOOT_FAIL": "a node of the job failed to boot",
    "DEADLINE": "the job missed its deadline",
    "OUT_OF_MEMORY": "the job ran out of memory",
}


@dataclass(frozen=True)
class SlurmJobSettings:
    """What a backend's config adds to every job: where it runs and writes its output."""

    partition: str = ""
    account: str = ""
    output_dir: str = "/tmp/ignara-slurm"
    launcher: str = "srun"  # "srun": one task per pod; "none": the batch step only


def output_path(settings: SlurmJobSettings, name: str) -> str:
    """The job's output file: named by the job (a validated workload id), so the logs of a
    run are found without asking Slurm, even after it has forgotten the job."""
    return str(PurePosixPath(settings.output_dir) / f"{name}.out")


def _per_pod(pods: tuple[PodShape, ...]) -> PodShape:
    """One task shape for the whole gang: Slurm gives every task of a job the same
    resources, so pod sets that differ get the largest of each (over, never under)."""
    if not pods:
        return PodShape(count=1)
    cpus = [p.cpu_millis for p in pods if p.cpu_millis is not None]
    memory = [p.memory_bytes for p in pods if p.memory_bytes is not None]
    return PodShape(
        count=sum(p.count for p in pods),
        gpus=max(p.gpus for p in pods),
        cpu_millis=max(cpus) if cpus else None,
        memory_bytes=max(memory) if memory else None,
    )


def job_request(spec: JobSpec, settings: SlurmJobSettings) -> JobRequest:
    """The Slurm job for ``spec``: one task per pod, each with the pod's GPUs, CPUs (whole
    cores, at least one) and memory; the time limit is the max runtime rounded up to
    whole minutes. The command runs without a shell (``exec`` of its quoted words)."""
    pod = _per_pod(spec.pods)
    cpus = max(1, -(-(pod.cpu_millis or 0) // 1000))
    memory = None if pod.memory_bytes is None else max(1, -(-pod.memory_bytes // (cpus * _MIB)))
    launch = "srun --kill-on-bad-exit=1 -- " if settings.launcher == "srun" else ""
    script = (
        "#!/bin/bash\n"
        f"# ignara job {spec.workload_id}: {pod.count} task(s)\n"
        f"exec {launch}{shlex.join(spec.command)}\n"
    )
    environment = {"PATH": BASE_PATH, **spec.env, "IGNARA_JOB": spec.workload_id}
    # Validated by the API before it was stored; converted again, as any stored input.
    asked = msgspec.convert(spec.options.get("slurm", {}), SlurmOptions)
    comment = f"ignara {spec.workload_id}"
    return JobRequest(
        name=spec.workload_id,
        script=script,
        environment=environment,
        working_directory=settings.output_dir,
        standard_output=output_path(settings, spec.workload_id),
        tasks=pod.count,
        cpus_per_task=cpus,
        gpus_per_task=pod.gpus,
        memory_per_cpu_mb=memory,
        time_limit_minutes=max(1, -(-spec.max_runtime_seconds // 60)),
        partition=settings.partition,
        account=settings.account,
        comment=f"{comment}: {asked.comment}" if asked.comment else comment,
        constraints=asked.constraint,
        qos=asked.qos,
        exclusive=asked.exclusive,
        time_minimum_minutes=asked.time_min,
        nice=asked.nice,
        reservation=asked.reservation,
    )


def decode_exit_code(raw: int | None) -> int | None:
    """Slurm reports the batch step's raw wait status: the exit status in the high byte,
    or the signal that ended it in the low bits (36608 -> 143; 15 -> -15)."""
    if raw is None or raw < 0:
        return None
    if raw & 0x7F:
        return -(raw & 0x7F)
    return (raw >> 8) & 0xFF


def _time(epoch: int) -> datetime | None:
    return datetime.fromtimestamp(epoch, UTC) if epoch > 0 else None


def job_status(record: JobRecord) -> JobStatus:
    """The gateway's view of a Slurm job record: state, the pending reason as the message
    while it waits, start/end, and the decoded exit code once it ended."""
    slurm_state = record.state.split()[0].upper() if record.state else ""
    state = _STATES.get(slurm_state, JobState.RUNNING)
    reason = "" if record.reason in ("", "None") else record.reason
    exit_code = decode_exit_code(record.exit_code) if state.is_final else None
    if state is JobState.PENDING:
        message = f"pending on Slurm: {reason}" if reason else "pending on Slurm"
    elif state is JobState.FAILED:
        message = _ENDED_BECAUSE.get(slurm_state, f"exited with code {exit_code}")
        if reason:
            message = f"{message} ({reason})"
    elif state is JobState.CANCELLED:
        message = "cancelled on Slurm"
    else:
        message = ""
    return JobStatus(
        state=state,
        exit_code=exit_code,
        started_at=_time(record.start_time),
        finished_at=_time(record.end_time) if state.is_final else None,
        message=message,
        backend_job_id=str(record.job_id),
        backend_state=slurm_state,
    )
