"""Rules of the Ray adapter that a real Ray cannot be made to show on demand, against
Ray's recorded answers (shared/notes/backends.md §2): a submit racing another one adopts
the job Ray already has, and a job that ended between two looks never starts after its
end."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx

from gateway.backends import JobSpec, JobState
from gateway.backends.ray import RayBackend

ALREADY_EXISTS = (
    'Traceback (most recent call last):\n  File "job_head.py", line 1, in submit_job\n'
    "ValueError: Job with submission_id wl-1-1 already exists. Please use a different one.\n"
)
END_MS = 1_795_627_460_000


def ray(answer: Callable[[httpx.Request], httpx.Response]) -> tuple[RayBackend, list[str]]:
    calls: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(f"{request.method} {request.url.path}")
        return answer(request)

    backend = RayBackend("ray-east", "http://ray.test", transport=httpx.MockTransport(handle))
    return backend, calls


def info(status: str, **fields: object) -> httpx.Response:
    body = {"submission_id": "wl-1-1", "status": status, "message": "", **fields}
    return httpx.Response(200, text=json.dumps(body))


async def test_a_submit_racing_another_adopts_the_job_ray_already_has() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(404, text="Job wl-1-1 does not exist")
        return httpx.Response(500, text=ALREADY_EXISTS)

    backend, calls = ray(answer)
    await backend.submit(JobSpec("wl-1-1", ("true",), {}, 60))  # no error: the same job
    assert calls == ["GET /api/jobs/wl-1-1", "POST /api/jobs/"]
    await backend.close()


async def test_a_job_that_ended_between_two_looks_does_not_start_after_its_end() -> None:
    looks = 0

    def answer(request: httpx.Request) -> httpx.Response:
        nonlocal looks
        if request.method == "POST":
            return httpx.Response(200, text='{"job_id": "wl-1-1", "submission_id": "wl-1-1"}')
        looks += 1
        if looks == 1:  # submit's look: not there yet
            return httpx.Response(404, text="Job wl-1-1 does not exist")
        return info("SUCCEEDED", end_time=END_MS, driver_exit_code=0)

    backend, _ = ray(answer)
    await backend.submit(JobSpec("wl-1-1", ("true",), {}, 60))
    status = await backend.status("wl-1-1")
    assert status.state is JobState.SUCCEEDED
    assert status.started_at is not None and status.started_at == status.finished_at
    await backend.close()
