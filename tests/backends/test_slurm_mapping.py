"""The Slurm adapter's mapping, table by table: a gang -> the v0.0.38 submit body, a job
record -> JobStatus, wait statuses -> exit codes, Slurm's errors -> backend errors. The
keys sent are checked against the OpenAPI document the real slurmrestd 22.05 serves."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gateway.backends import (
    BackendError,
    BackendUnavailableError,
    JobRejectedError,
    JobSpec,
    JobState,
    PodShape,
)
from gateway.backends.slurm.errors import SlurmJobNotFoundError, error_for
from gateway.backends.slurm.mapping import (
    SlurmJobSettings,
    decode_exit_code,
    job_request,
    job_status,
)
from gateway.backends.slurm.wire import V0038, WIRE_FORMATS, ApiError, JobRecord
from tenants.config_file import SLURM_API_VERSIONS

OPENAPI = Path(__file__).parent / "slurm-v0.0.38-job-properties.json"
SETTINGS = SlurmJobSettings(partition="debug", account="ml", output_dir="/srv/out")
GIB = 2**30


def spec(*pods: PodShape, runtime: int = 3600, command: tuple[str, ...] = ("train",)) -> JobSpec:
    return JobSpec("abc-1", command, {"SEED": "1"}, runtime, pods=pods)


def test_every_api_version_the_config_accepts_has_wire_shapes() -> None:
    assert set(WIRE_FORMATS) == set(SLURM_API_VERSIONS)


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        # 2 pods x 1 GPU, half a core: one task per pod, a whole core each.
        (
            spec(PodShape(2, gpus=1, cpu_millis=500)),
            {"tasks": 2, "gpus_per_task": "1", "cpus_per_task": 1, "time_limit": 60},
        ),
        # 4 pods x 8 GPUs, 3.5 cores, 64 GiB each: memory per CPU, rounded up.
        (
            spec(PodShape(4, gpus=8, cpu_millis=3500, memory_bytes=64 * GIB), runtime=61),
            {
                "tasks": 4,
                "gpus_per_task": "8",
                "cpus_per_task": 4,
                "memory_per_cpu": 16384,
                "time_limit": 2,
            },
        ),
        # No GPUs: no GPU key at all; no shape: one task.
        (spec(runtime=1), {"tasks": 1, "cpus_per_task": 1, "time_limit": 1}),
        # Pod sets that differ: every task gets the largest of each.
        (
            spec(PodShape(1, gpus=0, cpu_millis=8000), PodShape(3, gpus=2, cpu_millis=1000)),
            {"tasks": 4, "gpus_per_task": "2", "cpus_per_task": 8, "time_limit": 60},
        ),
    ],
)
def test_a_gang_becomes_one_job(job: JobSpec, expected: dict[str, Any]) -> None:
    body = V0038().submit_body(job_request(job, SETTINGS))
    sent = body["job"]
    for key in ("gpus_per_task", "memory_per_cpu"):
        if key not in expected:
            assert key not in sent
    assert {k: sent[k] for k in expected} == expected
    assert sent["name"] == "abc-1"
    assert sent["partition"] == "debug" and sent["account"] == "ml"
    assert sent["standard_output"] == "/srv/out/abc-1.out"
    assert sent["current_working_directory"] == "/srv/out"
    # v0.0.38 refuses a job without environment (error 2127).
    assert sent["environment"]["SEED"] == "1" and sent["environment"]["PATH"]
    assert sent["environment"]["IGNARA_JOB"] == "abc-1"
    properties = set(json.loads(OPENAPI.read_text()))
    assert set(sent) <= properties, set(sent) - properties


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, {"comment": "ignara abc-1"}),
        (
            {
                "constraint": "a100&ib",
                "qos": "high",
                "exclusive": True,
                "time_min": 30,
                "nice": 100,
                "comment": "sweep 7",
                "reservation": "maint",
            },
            {
                "constraints": "a100&ib",
                "qos": "high",
                "exclusive": "exclusive",
                "time_minimum": 30,
                "nice": 100,
                "comment": "ignara abc-1: sweep 7",
                "reservation": "maint",
            },
        ),
        ({"exclusive": False}, {"comment": "ignara abc-1"}),  # Slurm's default: not sent
    ],
)
def test_the_slurm_section_maps_onto_job_fields(
    options: dict[str, Any], expected: dict[str, Any]
) -> None:
    job = JobSpec("abc-1", ("train",), {}, 3600, options={"slurm": options, "ray": {"x": 1}})
    sent = V0038().submit_body(job_request(job, SETTINGS))["job"]
    asked = {"constraints", "qos", "exclusive", "time_minimum", "nice", "comment", "reservation"}
    assert {k: sent[k] for k in asked if k in sent} == expected
    assert set(sent) <= set(json.loads(OPENAPI.read_text()))


def test_the_command_runs_without_a_shell_reading_it() -> None:
    job = spec(command=("python3", "-c", "print('$HOME; rm -rf /')", "--flag"))
    script = job_request(job, SETTINGS).script
    assert script.startswith("#!/bin/bash\n")
    assert script.splitlines()[-1] == (
        "exec srun --kill-on-bad-exit=1 -- python3 -c 'print('\"'\"'$HOME; rm -rf /'\"'\"')' --flag"
    )
    batch_only = SlurmJobSettings(launcher="none")
    assert job_request(spec(), batch_only).script.splitlines()[-1] == "exec train"


@pytest.mark.parametrize(
    ("raw", "code"),
    [(0, 0), (256, 1), (36608, 143), (15, -15), (9, -9), (None, None), (-1, None)],
)
def test_wait_statuses_decode_to_exit_codes(raw: int | None, code: int | None) -> None:
    assert decode_exit_code(raw) == code


T0, T1 = 1_795_000_000, 1_795_000_042


@pytest.mark.parametrize(
    ("record", "state", "exit_code", "message"),
    [
        (JobRecord(7, "j", "PENDING", "Resources"), JobState.PENDING, None, "Resources"),
        (JobRecord(7, "j", "PENDING", "None"), JobState.PENDING, None, "pending on Slurm"),
        (JobRecord(7, "j", "CONFIGURING"), JobState.PENDING, None, ""),
        (JobRecord(7, "j", "RUNNING", "None", T0), JobState.RUNNING, None, ""),
        (JobRecord(7, "j", "COMPLETING", "None", T0), JobState.RUNNING, None, ""),
        (JobRecord(7, "j", "COMPLETED", "None", T0, T1, 0), JobState.SUCCEEDED, 0, ""),
        (JobRecord(7, "j", "FAILED", "NonZeroExitCode", T0, T1, 768), JobState.FAILED, 3, "3"),
        (JobRecord(7, "j", "CANCELLED", "None", T0, T1, 15), JobState.CANCELLED, -15, "cancel"),
        (JobRecord(7, "j", "TIMEOUT", "None", T0, T1, 0), JobState.FAILED, 0, "time limit"),
        (JobRecord(7, "j", "OUT_OF_MEMORY", "", T0, T1, 9), JobState.FAILED, -9, "memory"),
        (JobRecord(7, "j", "NODE_FAIL", "", T0, T1), JobState.FAILED, None, "node"),
        (JobRecord(7, "j", "SOMETHING_NEW"), JobState.RUNNING, None, ""),
    ],
)
def test_job_records_map_to_statuses(
    record: JobRecord, state: JobState, exit_code: int | None, message: str
) -> None:
    status = job_status(record)
    assert status.state is state
    assert status.exit_code == exit_code
    assert message in status.message
    assert status.backend_job_id == "7" and status.backend_state == record.state
    assert status.started_at == (datetime.fromtimestamp(T0, UTC) if record.start_time else None)
    if state.is_final and record.end_time:
        assert status.finished_at == datetime.fromtimestamp(T1, UTC)
    else:
        assert status.finished_at is None


@pytest.mark.parametrize(
    ("status", "errors", "kind", "words"),
    [
        (401, [], BackendUnavailableError, "credentials"),
        (500, [ApiError(2017, "Invalid job id specified")], SlurmJobNotFoundError, "no such job"),
        (500, [ApiError(2014, "Requested node config")], JobRejectedError, "no node"),
        (500, [ApiError(2000, "Invalid partition")], BackendError, "partition"),
        (503, [], BackendUnavailableError, "unavailable"),
        (500, [ApiError(-1, "Unable to find JobId")], BackendError, "Unable to find JobId"),
        (400, [], BackendError, "Unable to parse query"),
    ],
)
def test_slurm_errors_map_to_backend_errors(
    status: int, errors: list[ApiError], kind: type[BackendError], words: str
) -> None:
    error = error_for("submitting", status, errors, "Unable to parse query")
    assert type(error) is kind or (kind is BackendError and isinstance(error, BackendError))
    assert words in str(error)


def test_answers_are_read_as_typed_records() -> None:
    wire = V0038()
    body = json.dumps(
        {
            "meta": {},
            "errors": [],
            "jobs": [
                {
                    "job_id": 4,
                    "name": "w-1",
                    "job_state": "RUNNING",
                    "state_reason": "None",
                    "start_time": T0,
                    "end_time": 0,
                    "exit_code": 0,
                    "gres_detail": ["gpu:2(IDX:0-1)"],
                }
            ],
        }
    ).encode()
    assert wire.job_records(body) == [JobRecord(4, "w-1", "RUNNING", "None", T0, 0, 0)]
    assert wire.submitted_job_id(b'{"errors": [], "job_id": 9, "step_id": "BATCH"}') == 9
    assert wire.errors(b'{"errors": [{"error_number": 2017, "description": "Invalid"}]}') == [
        ApiError(2017, "Invalid")
    ]
    assert wire.errors(b"Authentication failure") == []
    with pytest.raises(ValueError, match="cannot read"):
        wire.job_records(b'{"jobs": [{"job_id": "x"}]}')
