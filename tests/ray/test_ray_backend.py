"""The Ray adapter against a real Ray head (tests/ray/conftest.py): a gang runs as one job
with its GPUs, a resubmit (even by a new adapter, as after a crash) finds the job instead of
starting another, stop ends a running job, a job stopped while pending never runs to its end,
exit codes and logs come back, and an unreachable Ray is an error that makes work wait."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from gateway.backends import (
    BackendUnavailableError,
    JobLimits,
    JobSpec,
    JobState,
    JobStatus,
    PodShape,
)
from gateway.backends.ray import RayBackend
from gateway.backends.ray.client import RayJobExistsError
from gateway.backends.ray.mapping import job_request
from tests.support.gateways import free_port
from tests.support.processes import ended_within
from tests.support.ray import RayHead

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ray_jobs")]


@pytest.fixture
async def backend(ray: RayHead) -> AsyncIterator[RayBackend]:
    adapter = RayBackend("ray-east", ray.url, watch_interval=0.1)
    yield adapter
    await adapter.close()


def unique(prefix: str) -> str:
    # The head lives for the session and keeps every submission id: one id per test run.
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def until(
    backend: RayBackend, name: str, done: Callable[[JobStatus], bool], timeout: float = 60
) -> JobStatus:
    deadline = time.monotonic() + timeout
    while True:
        status = await backend.status(name)
        if done(status) or time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.2)


def ray_job(head: RayHead, submission_id: str) -> dict[str, object]:
    response = httpx.get(f"{head.url}/api/jobs/{submission_id}", timeout=10)
    response.raise_for_status()
    job: dict[str, object] = response.json()
    return job


async def test_a_gang_runs_as_one_job_with_its_gpus_env_and_logs(
    backend: RayBackend, ray: RayHead
) -> None:
    name = unique("gang")
    command = ("/bin/sh", "-c", 'echo "gpus=$CUDA_VISIBLE_DEVICES seed=$SEED job=$IGNARA_JOB"')
    pods = (PodShape(2, gpus=1, cpu_millis=500),)
    job = JobSpec(name, command, {"SEED": "s42"}, 120, JobLimits(cpu_millis=1000), pods)
    await backend.submit(job)
    submitted = ray_job(ray, name)
    assert submitted["metadata"] == {"ignara.job": name, "ignara.workload": "gang"}
    status = await until(backend, name, lambda s: s.state.is_final)
    assert status.state is JobState.SUCCEEDED and status.exit_code == 0, status
    assert status.backend_job_id == name and status.backend_state == "SUCCEEDED"
    assert status.started_at is not None and status.finished_at is not None
    logs = (await backend.logs(name)).decode()
    # The gang's two GPUs are the entrypoint's (Ray sets CUDA_VISIBLE_DEVICES for them).
    [line] = [line for line in logs.splitlines() if line.startswith("gpus=")]
    assert line == f"gpus=0,1 seed=s42 job={name}", logs
    assert await backend.logs(name, tail_bytes=4) == logs.encode()[-4:]


async def test_a_resubmit_finds_the_job_even_from_a_new_adapter(
    backend: RayBackend, ray: RayHead
) -> None:
    name = unique("once")
    job = JobSpec(name, ("sleep", "30"), {}, 120, pods=(PodShape(1),))
    assert await backend.submit(job) is False
    assert await backend.submit(job) is True  # found: the dispatcher records an adoption
    restarted = RayBackend("ray-east", ray.url)  # a gateway that crashed and came back
    try:
        other = JobSpec(name, ("echo", "a second job"), {}, 120, pods=(PodShape(1),))
        assert await restarted.submit(other) is True
        assert [j["submission_id"] for j in ray.jobs()].count(name) == 1
        assert ray_job(ray, name)["entrypoint"] == "exec timeout --kill-after=30 120 sleep 30"
        # Ray's own answer to a second POST of the id, which a racing submit would get.
        with pytest.raises(RayJobExistsError):
            await restarted.client.submit(job_request(other))
        await restarted.cancel(name)
    finally:
        await restarted.close()
    status = await until(backend, name, lambda s: s.state.is_final)
    assert status.state is JobState.CANCELLED and status.backend_state == "STOPPED"


async def test_stop_ends_a_running_job_and_exit_codes_come_back(backend: RayBackend) -> None:
    name = unique("long")
    await backend.submit(JobSpec(name, ("sleep", "300"), {}, 600, pods=(PodShape(1),)))
    running = await until(backend, name, lambda s: s.state is JobState.RUNNING)
    assert running.state is JobState.RUNNING and running.backend_state == "RUNNING"
    assert running.started_at is not None
    await backend.cancel(name)
    stopped = await until(backend, name, lambda s: s.state.is_final)
    assert stopped.state is JobState.CANCELLED and stopped.message == "stopped on Ray"
    await backend.cancel(name)  # again: nothing to do
    await backend.cancel("never-submitted")
    assert (await backend.status("never-submitted")).state is JobState.UNKNOWN
    assert await backend.logs("never-submitted") == b""

    failing = unique("exit")
    await backend.submit(JobSpec(failing, ("/bin/sh", "-c", "exit 3"), {}, 60))
    failed = await until(backend, failing, lambda s: s.state.is_final)
    assert failed.state is JobState.FAILED and failed.exit_code == 3, failed
    assert "Traceback" not in failed.message


async def test_a_job_is_ended_at_its_max_runtime(backend: RayBackend) -> None:
    name = unique("slow")
    await backend.submit(JobSpec(name, ("sleep", "60"), {}, 2))
    ended = await until(backend, name, lambda s: s.state.is_final)
    assert ended.state is JobState.FAILED and ended.exit_code == 124, ended
    assert "max runtime" in ended.message


async def test_a_job_stopped_while_pending_never_runs_to_its_end(
    backend: RayBackend, tmp_path: Path
) -> None:
    # All eight GPUs taken: the victim waits on Ray.
    hog, victim = unique("hog"), unique("victim")
    marker, pidfile = tmp_path / "victim-finished", tmp_path / "victim-pid"
    await backend.submit(JobSpec(hog, ("sleep", "4"), {}, 60, pods=(PodShape(1, gpus=8),)))
    await until(backend, hog, lambda s: s.state is JobState.RUNNING)
    # Its end is far enough away (30 s) that the stop, however late a loaded machine makes
    # it (a poll and two round trips to Ray), comes first: what is asserted is that it came.
    command = ("/bin/sh", "-c", f"echo $$ > {pidfile} && sleep 30 && touch {marker}")
    await backend.submit(JobSpec(victim, command, {}, 60, pods=(PodShape(1, gpus=1),)))
    assert (await backend.status(victim)).state is JobState.PENDING
    await backend.cancel(victim)
    # Ray said "stopped" but keeps it pending: the gateway must not take it as ended.
    waiting = await backend.status(victim)
    assert waiting.state is JobState.PENDING and "stop requested" in waiting.message
    assert victim in backend.stopping()
    # Nobody asks for its status now: the adapter's own watch stops it once Ray runs it.
    deadline = time.monotonic() + 60
    while victim in backend.stopping() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    ended = await backend.status(victim)
    assert ended.state is JobState.CANCELLED, ended
    # Stopped either before its shell started or while it slept: no process of it is left.
    if pidfile.exists():
        pid = int(pidfile.read_text())
        ended = await asyncio.to_thread(ended_within, pid, 15)
        assert ended, f"the stopped job's shell {pid} still runs"
    assert not marker.exists()


async def test_an_unreachable_ray_is_a_backend_error_that_makes_work_wait() -> None:
    gone = RayBackend("ray-east", f"http://127.0.0.1:{free_port()}", timeout=2)
    no_token = RayBackend("ray-east", "http://127.0.0.1:1", token_required=True)
    job = JobSpec("w-1", ("true",), {}, 60)
    try:
        for call in (gone.submit(job), gone.status("w-1"), gone.cancel("w-1"), gone.logs("w-1")):
            with pytest.raises(BackendUnavailableError, match="cannot reach Ray"):
                await call
        with pytest.raises(BackendUnavailableError, match="token"):
            await no_token.submit(job)
    finally:
        await gone.close()
        await no_token.close()
