"""From the gateway's job to a Ray job request and from Ray's job info (and its plain-text
errors) to what the gateway sees: by table, no Ray needed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gateway.backends import (
    BackendError,
    BackendUnavailableError,
    JobLimits,
    JobRejectedError,
    JobSpec,
    JobState,
    PodShape,
)
from gateway.backends.ray.client import RayError, RayJobExistsError, RayJobNotFoundError, error_for
from gateway.backends.ray.mapping import RayJobInfo, job_request, job_status, read_job_info

GIB = 2**30


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            JobSpec("wl-7-1", ("true",), {}, 60),
            {"entrypoint": "exec timeout --kill-after=30 60 true"},
        ),
        (
            # A gang's totals: 2 pods x 1 GPU, limits summed over the pods by the dispatcher.
            JobSpec(
                "wl-7-2",
                ("python", "train.py", "--lr", "0.1"),
                {"SEED": "1"},
                3600,
                JobLimits(memory_bytes=4 * GIB, cpu_millis=1500),
                (PodShape(2, gpus=1, cpu_millis=750, memory_bytes=2 * GIB),),
            ),
            {
                "entrypoint": "exec timeout --kill-after=30 3600 python train.py --lr 0.1",
                "entrypoint_num_gpus": 2,
                "entrypoint_num_cpus": 1.5,
                "entrypoint_memory": 4 * GIB,
            },
        ),
        (
            # Two pod sets: their GPUs add up.
            JobSpec("wl-8-1", ("run",), {}, 60, pods=(PodShape(1, gpus=4), PodShape(3, gpus=1))),
            {"entrypoint": "exec timeout --kill-after=30 60 run", "entrypoint_num_gpus": 7},
        ),
        (
            # Words that a shell would read as syntax stay words.
            JobSpec("wl-9-1", ("echo", "$HOME; rm -rf /", "a b"), {}, 60),
            {"entrypoint": "exec timeout --kill-after=30 60 echo '$HOME; rm -rf /' 'a b'"},
        ),
    ],
)
def test_a_job_becomes_a_ray_submission(spec: JobSpec, expected: dict[str, Any]) -> None:
    body = job_request(spec).body()
    workload = spec.workload_id.rsplit("-", 1)[0]
    assert body == {
        "submission_id": spec.workload_id,
        "runtime_env": {"env_vars": {**spec.env, "IGNARA_JOB": spec.workload_id}},
        "metadata": {"ignara.job": spec.workload_id, "ignara.workload": workload},
        **expected,
    }


T0 = 1_795_627_459_614
STARTED = datetime(2026, 11, 25, 17, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("info", "state", "exit_code", "message", "finished"),
    [
        (RayJobInfo("j", "PENDING", "Job has not started yet."), JobState.PENDING, None,
         "pending on Ray: Job has not started yet.", None),
        (RayJobInfo("j", "RUNNING", "Job is currently running."), JobState.RUNNING, None, "", None),
        (RayJobInfo("j", "SUCCEEDED", "ok", T0, 0), JobState.SUCCEEDED, 0, "", T0),
        (RayJobInfo("j", "FAILED", "Job entrypoint command failed with exit code 3", T0, 3),
         JobState.FAILED, 3, "Job entrypoint command failed with exit code 3", T0),
        (RayJobInfo("j", "FAILED", "", T0, 3), JobState.FAILED, 3, "exited with code 3", T0),
        (RayJobInfo("j", "STOPPED", "Job was intentionally stopped.", T0, None),
         JobState.CANCELLED, None, "stopped on Ray", T0),
        # A state word Ray may add later: not an end the gateway cannot see.
        (RayJobInfo("j", "DRAINING", ""), JobState.RUNNING, None, "", None),
        # Ray's own machinery ended the job (its supervisor died with the head, or a head
        # back with its job table found it gone): lost, not the job's failure.
        (RayJobInfo("j", "FAILED", "Job supervisor actor died: The actor died\n\tpid: 7",
                    T0, None, "JOB_SUPERVISOR_ACTOR_DIED"),
         JobState.LOST, None,
         "Ray lost the job (JOB_SUPERVISOR_ACTOR_DIED): Job supervisor actor died: The actor "
         "died pid: 7", T0),
        (RayJobInfo("j", "FAILED", "Unexpected error occurred: failed to get job supervisor.",
                    T0, None, "JOB_SUPERVISOR_ACTOR_START_FAILURE"),
         JobState.LOST, None,
         "Ray lost the job (JOB_SUPERVISOR_ACTOR_START_FAILURE): Unexpected error occurred: "
         "failed to get job supervisor.", T0),
        # The job's own failures, and Ray giving up on placing it, stay failures.
        (RayJobInfo("j", "FAILED", "Job entrypoint command failed with exit code 3", T0, 3,
                    "JOB_ENTRYPOINT_COMMAND_ERROR"),
         JobState.FAILED, 3, "Job entrypoint command failed with exit code 3", T0),
        (RayJobInfo("j", "FAILED", "runtime_env setup failed: no such pip package", T0, None,
                    "RUNTIME_ENV_SETUP_FAILURE"),
         JobState.FAILED, None, "runtime_env setup failed: no such pip package", T0),
        (RayJobInfo("j", "FAILED", "Job supervisor actor failed to start within 900.0 s",
                    T0, None, "JOB_SUPERVISOR_ACTOR_START_TIMEOUT"),
         JobState.FAILED, None, "Job supervisor actor failed to start within 900.0 s", T0),
    ],
)  # fmt: skip
def test_ray_job_info_becomes_a_status(
    info: RayJobInfo, state: JobState, exit_code: int | None, message: str, finished: int | None
) -> None:
    status = job_status(info, STARTED)
    assert status.state is state
    assert status.exit_code == exit_code
    assert status.message == message
    assert status.finished_at == (
        None if finished is None else datetime.fromtimestamp(T0 / 1000, UTC)
    )
    assert status.started_at == STARTED  # the gateway's own sighting, not Ray's start_time
    assert (status.backend_job_id, status.backend_state) == ("j", info.status)


def test_the_gateways_names_for_the_job_go_into_its_metadata() -> None:
    spec = JobSpec("wl-7-2", ("true",), {}, 60, tenant="alpha", queue="team-a")
    assert job_request(spec).body()["metadata"] == {
        "ignara.job": "wl-7-2",
        "ignara.workload": "wl-7",
        "ignara.tenant": "alpha",
        "ignara.queue": "team-a",
    }


def test_a_job_ended_by_its_max_runtime_says_so() -> None:
    status = job_status(RayJobInfo("j", "FAILED", "Job entrypoint command failed", T0, 124))
    assert status.state is JobState.FAILED and status.exit_code == 124
    assert status.message == "ended at its max runtime (exit code 124 from timeout)"


def test_a_long_failure_message_is_bounded_and_on_one_line() -> None:
    status = job_status(RayJobInfo("j", "FAILED", "line\n" * 500, T0, 1))
    assert len(status.message) <= 500 and "\n" not in status.message


@pytest.mark.parametrize(
    "body",
    [None, [], "text", {"status": "RUNNING"}, {"submission_id": 3, "status": "RUNNING"}],
)
def test_an_unreadable_job_info_is_none(body: object) -> None:
    assert read_job_info(body) is None


def test_job_info_reads_what_ray_sends() -> None:
    body = {
        "type": "SUBMISSION", "job_id": None, "submission_id": "wl-1-1", "driver_info": None,
        "status": "FAILED", "entrypoint": "exec false", "message": "failed",
        "error_type": None, "start_time": T0, "end_time": T0 + 5, "metadata": None,
        "driver_exit_code": 1,
    }  # fmt: skip
    assert read_job_info(body) == RayJobInfo("wl-1-1", "FAILED", "failed", T0 + 5, 1)
    body["error_type"] = "JOB_SUPERVISOR_ACTOR_DIED"
    assert read_job_info(body) == RayJobInfo(
        "wl-1-1", "FAILED", "failed", T0 + 5, 1, "JOB_SUPERVISOR_ACTOR_DIED"
    )


TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/ray/dashboard/modules/job/job_head.py", line 300, in submit_job\n'
    "    raise ValueError(...)\n"
    "ValueError: Job with submission_id wl-1-1 already exists. Please use a different one.\n"
)


@pytest.mark.parametrize(
    ("status", "text", "error", "says"),
    [
        (404, "Job wl-1-1 does not exist", RayJobNotFoundError, "knows no such job"),
        (500, TRACEBACK, RayJobExistsError, "already exists"),
        (400, "Traceback ...\nTypeError: __init__() got an unexpected keyword argument 'x'",
         JobRejectedError, "unexpected keyword argument"),
        (401, "Unauthorized", BackendUnavailableError, "credentials"),
        (403, "Forbidden", BackendUnavailableError, "credentials"),
        (502, "<html>Bad gateway</html>", BackendUnavailableError, "unavailable"),
        (503, "", BackendUnavailableError, "unavailable"),
        (500, "Traceback (most recent call last):\n  File x\nRuntimeError: GCS down",
         RayError, "RuntimeError: GCS down"),
    ],
)  # fmt: skip
def test_rays_plain_text_errors_become_backend_errors_without_tracebacks(
    status: int, text: str, error: type[BackendError], says: str
) -> None:
    mapped = error_for("submitting job wl-1-1", status, text)
    assert type(mapped) is error
    assert says in str(mapped)
    assert "Traceback" not in str(mapped) and "File " not in str(mapped)
    assert len(str(mapped)) < 400
