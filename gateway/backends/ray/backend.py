"""``RayBackend``: admitted gangs as Ray jobs, through the Jobs REST API.

- submit: the submission id is the gateway's job name (``<workload>-<attempt>``); the adapter
  first asks for a job of that id (GET), and Ray's 500 "already exists" on POST is taken as
  the same job, so a resubmit after a crash adopts the job instead of starting another;
- status: GET /api/jobs/{id}; Ray's ``start_time`` is the *submission* time, so the start
  reported is the gateway's own observation of the job going from PENDING to RUNNING
  (``None`` when this process did not see it start: the row keeps what was noted before);
- cancel: POST /api/jobs/{id}/stop. **Ray does not cancel a PENDING job on stop**: it stays
  pending, starts once resources free up, and only then stops. So a job stopped while
  pending is kept on a watch list: a background task looks at it often and stops it again
  the moment it runs, and its status stays PENDING (with a message saying so) until Ray has
  ended it, so the dispatcher, whose database row holds the intent across restarts, keeps
  asking too;
- logs: GET /api/jobs/{id}/logs (the driver's output);
- Ray unreachable: :class:`BackendUnavailableError` from every call; the workload waits and
  nothing is submitted twice.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import httpx

from gateway.backends.base import (
    BackendClosedError,
    BackendError,
    JobSpec,
    JobState,
    JobStatus,
    validate_workload_id,
)
from gateway.backends.ray.client import RayClient, RayJobExistsError
from gateway.backends.ray.mapping import RayJobInfo, job_request, job_status

__all__ = ["RayBackend"]

log = logging.getLogger(__name__)

_MAX_TAIL = 8 * 1024 * 1024
_STOP_PENDING_MESSAGE = (
    "stop requested while pending on Ray; Ray starts such a job before it can be stopped, "
    "so the gateway stops it the moment it runs"
)


class RayBackend:
    """A Ray cluster behind its dashboard's Jobs REST API."""

    def __init__(
        self,
        name: str,
        url: str,
        *,
        token: str | None = None,
        token_required: bool = False,
        timeout: float = 10.0,
        watch_interval: float = 0.2,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.name = name
        self.client = RayClient(
            url,
            token=token,
            token_required=token_required,
            timeout=timeout,
            transport=transport,
        )
        self.watch_interval = watch_interval
        # Jobs this process submitted or saw pending: their first RUNNING sighting is the
        # start time; and the start times seen.
        self._seen_pending: set[str] = set()
        self._started: dict[str, datetime] = {}
        # Jobs stopped while pending: stopped again as soon as Ray runs them.
        self._stopping: set[str] = set()
        self._watcher: asyncio.Task[None] | None = None
        self._closed = False

    def __repr__(self) -> str:  # never the token
        return f"RayBackend({self.name!r}, {self.client.url!r})"

    async def submit(self, job: JobSpec) -> bool:
        """Submit ``job``; True when Ray already had it (the dispatcher adopts it)."""
        self._check_open()
        if await self.client.job(job.workload_id) is not None:
            return True  # submitted before (e.g. by a gateway that crashed before it noted it)
        try:
            await self.client.submit(job_request(job))
        except RayJobExistsError:
            return True  # submitted meanwhile by another pass or gateway: the same job
        self._seen_pending.add(job.workload_id)
        log.info("submitted %s to Ray backend %s", job.workload_id, self.name)
        return False

    async def status(self, workload_id: str) -> JobStatus:
        self._check_open()
        validate_workload_id(workload_id)
        info = await self.client.job(workload_id)
        if info is None:
            self._forget(workload_id)
            return JobStatus(JobState.UNKNOWN, message=f"Ray knows no job {workload_id}")
        self._observe(info)
        status = job_status(info, self._started.get(workload_id))
        if status.state.is_final:
            self._started.pop(workload_id, None)  # reported once; the row keeps it
        if workload_id in self._stopping:
            if status.state is JobState.RUNNING:
                await self.client.stop(workload_id)
            if not status.state.is_final:
                return JobStatus(
                    JobState.PENDING if status.state is JobState.PENDING else JobState.RUNNING,
                    started_at=status.started_at,
                    message=_STOP_PENDING_MESSAGE,
                    backend_job_id=status.backend_job_id,
                    backend_state=status.backend_state,
                )
        return status

    async def cancel(self, workload_id: str) -> None:
        self._check_open()
        validate_workload_id(workload_id)
        info = await self.client.job(workload_id)
        if info is None or job_status(info).state.is_final:
            self._stopping.discard(workload_id)
            return
        await self.client.stop(workload_id)
        if info.status != "RUNNING":
            # Pending (or a state the gateway does not know): Ray will run it later.
            self._stopping.add(workload_id)
            self._watch()

    async def logs(self, workload_id: str, tail_bytes: int = 65536) -> bytes:
        self._check_open()
        validate_workload_id(workload_id)
        tail = max(0, min(tail_bytes, _MAX_TAIL))
        if tail == 0:
            return b""
        return (await self.client.logs(workload_id)).encode("utf-8", "replace")[-tail:]

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._watcher is not None:
                self._watcher.cancel()
                await asyncio.gather(self._watcher, return_exceptions=True)
            await self.client.aclose()

    def stopping(self) -> frozenset[str]:
        """The jobs stopped while pending that Ray has not ended yet."""
        return frozenset(self._stopping)

    def _observe(self, info: RayJobInfo) -> None:
        job = info.submission_id
        if info.status == "PENDING":
            self._seen_pending.add(job)
        elif job in self._seen_pending and job not in self._started:
            # The first sighting after PENDING; for a job that ended between two looks,
            # its end is the best bound the gateway has (never a start after the end).
            now = datetime.now(UTC)
            ended = job_status(info).finished_at
            self._started[job] = min(now, ended) if ended is not None else now
        if job_status(info).state.is_final:
            self._seen_pending.discard(job)
            self._stopping.discard(job)

    def _forget(self, job: str) -> None:
        self._seen_pending.discard(job)
        self._stopping.discard(job)
        self._started.pop(job, None)

    def _watch(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.create_task(self._watch_stopping(), name=f"ray-{self.name}")

    async def _watch_stopping(self) -> None:
        """Until every job stopped while pending has ended: look at each, stop it again as
        soon as it runs."""
        while self._stopping and not self._closed:
            for job in sorted(self._stopping):
                try:
                    await self.status(job)  # stops it again if it runs; forgets it once ended
                except BackendError as err:
                    log.warning(
                        "Ray backend %s: cannot follow stopped job %s: %s", self.name, job, err
                    )
                except Exception:  # the top of a background task: log, keep watching
                    log.exception("Ray backend %s: watching stopped job %s", self.name, job)
            await asyncio.sleep(self.watch_interval)

    def _check_open(self) -> None:
        if self._closed:
            raise BackendClosedError()
