"""The Slurm adapter against a real slurmctld/slurmd/slurmrestd (tests/slurm/conftest.py):
a gang runs as one job with its GPUs, a resubmit (even by a new adapter, as after a crash)
finds the job instead of starting another, cancel stops it, exit codes and logs come
back, and an unreachable or refusing slurmrestd is an error that makes work wait."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from gateway.backends import (
    BackendError,
    BackendUnavailableError,
    JobRejectedError,
    JobSpec,
    JobState,
    JobStatus,
    PodShape,
)
from gateway.backends.slurm import SlurmBackend, SlurmJobSettings
from tests.support.gateways import free_port
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("slurm_jobs")]


def adapter(cluster: SlurmCluster, output: Path, token: str | None = None) -> SlurmBackend:
    return SlurmBackend(
        "hpc",
        cluster.url,
        token=cluster.token if token is None else token,
        user=cluster.user,
        job_settings=SlurmJobSettings(partition=cluster.partition, output_dir=str(output)),
    )


@pytest.fixture
async def hpc(slurm: SlurmCluster) -> AsyncIterator[SlurmBackend]:
    backend = adapter(slurm, slurm.directory / "out")
    yield backend
    await backend.close()


async def until(
    backend: SlurmBackend, name: str, done: Callable[[JobStatus], bool], timeout: float = 60
) -> JobStatus:
    deadline = time.monotonic() + timeout
    while True:
        status = await backend.status(name)
        if done(status) or time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.3)


def jobs_named(cluster: SlurmCluster, name: str) -> list[dict[str, object]]:
    jobs = cluster.rest("GET", "/jobs")["jobs"]
    assert isinstance(jobs, list)
    return [j for j in jobs if j["name"] == name]


async def test_a_gang_runs_as_one_job_with_its_gpus_and_its_logs(
    hpc: SlurmBackend, slurm: SlurmCluster
) -> None:
    command = ("/bin/sh", "-c", 'echo "task $SLURM_PROCID gpus $CUDA_VISIBLE_DEVICES $SEED"')
    job = JobSpec("gang-1", command, {"SEED": "s42"}, 120, pods=(PodShape(2, gpus=1),))
    await hpc.submit(job)
    [record] = jobs_named(slurm, "gang-1")
    assert record["tres_per_task"] == "gres:gpu:1"
    status = await until(hpc, "gang-1", lambda s: s.state.is_final)
    assert status.state is JobState.SUCCEEDED and status.exit_code == 0, status
    assert status.backend_job_id == str(record["job_id"]) and status.backend_state == "COMPLETED"
    assert status.started_at is not None and status.finished_at is not None
    logs = (await hpc.logs("gang-1")).decode()
    # One line per task (pod), each with its own GPU and the job's environment.
    assert sorted(line.split()[1] for line in logs.splitlines()) == ["0", "1"], logs
    assert all(line.endswith("s42") for line in logs.splitlines()), logs
    assert await hpc.logs("gang-1", tail_bytes=4) == logs.encode()[-4:]


async def test_a_resubmit_finds_the_job_even_from_a_new_adapter(
    hpc: SlurmBackend, slurm: SlurmCluster
) -> None:
    job = JobSpec("once-1", ("sleep", "30"), {}, 120, pods=(PodShape(1),))
    await hpc.submit(job)
    await hpc.submit(job)
    restarted = adapter(slurm, slurm.directory / "out")  # a gateway that crashed and came back
    try:
        await restarted.submit(job)
        assert len(jobs_named(slurm, "once-1")) == 1
        assert (await restarted.status("once-1")).backend_job_id == (
            await hpc.status("once-1")
        ).backend_job_id
        await restarted.cancel("once-1")
    finally:
        await restarted.close()
    status = await until(hpc, "once-1", lambda s: s.state.is_final)
    assert status.state is JobState.CANCELLED


class Counting(httpx.AsyncHTTPTransport):
    """The real transport, counting the requests it carries (``"GET /slurm/.../jobs"``)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(f"{request.method} {request.url.path}")
        return await super().handle_async_request(request)


async def test_a_pass_lists_slurms_jobs_once_and_a_second_submit_still_finds_the_first(
    slurm: SlurmCluster,
) -> None:
    counting = Counting()
    settings = SlurmJobSettings(partition=slurm.partition, output_dir=str(slurm.directory / "out"))
    hpc = SlurmBackend(
        "hpc", slurm.url, token=slurm.token, user=slurm.user, job_settings=settings,
        transport=counting,
    )  # fmt: skip
    restarted = adapter(slurm, slurm.directory / "out")  # a gateway that crashed earlier
    jobs = [JobSpec(f"pass-{i}-1", ("sleep", "30"), {}, 120, pods=(PodShape(1),)) for i in range(4)]
    try:
        await restarted.submit(jobs[0])  # on Slurm before this adapter's pass begins
        hpc.begin_pass()
        found = [await hpc.submit(job) for job in jobs]
        assert found == [True, False, False, False]
        assert await hpc.submit(jobs[2]) is True  # the second submit finds the first
        listings = [c for c in counting.calls if c.startswith("GET ") and c.endswith("/jobs")]
        assert len(listings) == 1, counting.calls
        assert [len(jobs_named(slurm, job.workload_id)) for job in jobs] == [1, 1, 1, 1]
        # Another new adapter learns every job's id by name, from one listing.
        ids = SlurmBackend("hpc", slurm.url, token=slurm.token, user=slurm.user)
        ids.begin_pass()
        statuses = [await ids.status(job.workload_id) for job in jobs]
        assert all(s.state is not JobState.UNKNOWN for s in statuses), statuses
        assert [s.backend_job_id for s in statuses] == [
            hpc.backend_job_id(job.workload_id) for job in jobs
        ]
        await ids.close()
    finally:
        for job in jobs:
            await hpc.cancel(job.workload_id)
        await hpc.close()
        await restarted.close()


async def test_cancel_stops_a_running_job_and_exit_codes_come_back(
    hpc: SlurmBackend, slurm: SlurmCluster
) -> None:
    await hpc.submit(JobSpec("long-1", ("sleep", "300"), {}, 600, pods=(PodShape(1),)))
    running = await until(hpc, "long-1", lambda s: s.state is JobState.RUNNING)
    assert running.state is JobState.RUNNING and running.backend_state == "RUNNING"
    await hpc.cancel("long-1")
    stopped = await until(hpc, "long-1", lambda s: s.state.is_final)
    assert stopped.state is JobState.CANCELLED and stopped.backend_state == "CANCELLED"
    await hpc.cancel("long-1")  # again: nothing to do
    await hpc.cancel("never-submitted")

    await hpc.submit(JobSpec("exit-3", ("/bin/sh", "-c", "exit 3"), {}, 60, pods=(PodShape(1),)))
    failed = await until(hpc, "exit-3", lambda s: s.state.is_final)
    assert failed.state is JobState.FAILED and failed.exit_code == 3, failed
    assert (await hpc.status("never-submitted")).state is JobState.UNKNOWN


async def test_a_job_no_node_can_hold_is_rejected(hpc: SlurmBackend) -> None:
    too_big = JobSpec("huge-1", ("true",), {}, 60, pods=(PodShape(1, gpus=9),))
    with pytest.raises(JobRejectedError, match="no node"):
        await hpc.submit(too_big)


async def test_an_unreachable_or_refusing_slurmrestd_is_a_backend_error(
    slurm: SlurmCluster,
) -> None:
    job = JobSpec("w-1", ("true",), {}, 60)
    gone = SlurmBackend("hpc", f"http://127.0.0.1:{free_port()}", token="t", timeout=2)
    no_token = adapter(slurm, slurm.directory / "out", token="")
    bad_token = adapter(slurm, slurm.directory / "out", token="not-a-jwt")
    try:
        with pytest.raises(BackendUnavailableError, match="cannot reach slurmrestd"):
            await gone.submit(job)
        with pytest.raises(BackendUnavailableError, match="cannot reach"):
            await gone.status("w-1")
        with pytest.raises(BackendUnavailableError, match="token"):
            await no_token.submit(job)
        with pytest.raises(BackendError) as refused:
            await bad_token.submit(job)
        assert "not-a-jwt" not in str(refused.value)
    finally:
        for backend in (gone, no_token, bad_token):
            await backend.close()


async def test_a_job_slurm_holds_back_says_why(hpc: SlurmBackend) -> None:
    # The node has 2 CPUs: a 2-task job takes them all, the next one waits for Resources.
    await hpc.submit(JobSpec("blocker-1", ("sleep", "300"), {}, 600, pods=(PodShape(2),)))
    await until(hpc, "blocker-1", lambda s: s.state is JobState.RUNNING)
    await hpc.submit(JobSpec("queued-1", ("true",), {}, 60, pods=(PodShape(1, gpus=1),)))
    held = await until(hpc, "queued-1", lambda s: "Resources" in s.message)
    assert held.state is JobState.PENDING and held.backend_state == "PENDING"
    assert held.message == "pending on Slurm: Resources"
    await hpc.cancel("blocker-1")
    done = await until(hpc, "queued-1", lambda s: s.state.is_final)
    assert done.state is JobState.SUCCEEDED, done
