"""``SlurmBackend``: admitted gangs as Slurm batch jobs, through slurmrestd.

- submit: the job is named by the gateway's job name (``<workload>-<attempt>``); before
  submitting, the adapter looks for a job of that name (GET /jobs), so a resubmit after a
  crash adopts the job instead of starting a second one. Within one dispatcher pass
  (``begin_pass``) the list is read once and kept, with the jobs this adapter submits
  added as it submits them: N submits in a pass cost one listing, not N, and a second
  submit of a name still finds the first;
- status: GET /job/{id} (state, pending reason, start/end, exit code);
- cancel: DELETE /job/{id}: Slurm sends SIGTERM, then SIGKILL after its KillWait grace;
  the dispatcher keeps asking the status until the job has ended;
- logs: the tail of the job's output file (``output_dir/<name>.out``, which the gateway
  must be able to read: a shared filesystem, or the same machine);
- slurmrestd unreachable: :class:`BackendUnavailableError` from every call; the workload
  waits and nothing is submitted twice.

The name -> Slurm job id map is a cache: after a restart it is rebuilt from GET /jobs. Only
the dispatcher (one leader among gateways) submits, so no job of a name appears between a
pass's listing and its submits except this adapter's own.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import httpx

from gateway.backends.base import (
    BackendClosedError,
    JobSpec,
    JobState,
    JobStatus,
    validate_workload_id,
)
from gateway.backends.slurm.client import SlurmClient
from gateway.backends.slurm.mapping import SlurmJobSettings, job_request, job_status, output_path
from gateway.backends.slurm.wire import WIRE_FORMATS, JobRecord

__all__ = ["SlurmBackend"]

log = logging.getLogger(__name__)

_MAX_TAIL = 8 * 1024 * 1024


class SlurmBackend:
    """A Slurm cluster behind slurmrestd (``api_version`` picks the wire shapes)."""

    def __init__(
        self,
        name: str,
        url: str,
        *,
        token: str | None,
        user: str = "root",
        api_version: str = "v0.0.38",
        job_settings: SlurmJobSettings | None = None,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if api_version not in WIRE_FORMATS:
            raise ValueError(f"slurmrestd API {api_version!r} is not spoken here")
        self.name = name
        self.settings = job_settings or SlurmJobSettings()
        self.client = SlurmClient(
            url,
            user=user,
            token=token,
            wire=WIRE_FORMATS[api_version],
            timeout=timeout,
            transport=transport,
        )
        self._ids: dict[str, int] = {}
        # This pass's GET /jobs, newest job per name (None: not read in this pass, or no
        # pass: then every lookup lists again).
        self._listed: dict[str, JobRecord] | None = None
        self._in_pass = False
        self._closed = False

    def __repr__(self) -> str:  # never the token
        return f"SlurmBackend({self.name!r}, {self.client.url!r})"

    def begin_pass(self) -> None:
        """A dispatcher pass begins: the job list read in the last one is stale."""
        self._listed = None
        self._in_pass = True

    async def submit(self, job: JobSpec) -> bool:
        """Submit, or find the job of that name submitted before (e.g. by a gateway that
        crashed before it noted it): then ``True``, and nothing is submitted."""
        self._check_open()
        if job.workload_id in self._ids or await self._find(job.workload_id) is not None:
            return True
        request = job_request(job, self.settings)
        await asyncio.to_thread(self._prepare_output_dir)
        job_id = await self.client.submit(request)
        self._ids[job.workload_id] = job_id
        log.info("submitted %s to %s as Slurm job %d", job.workload_id, self.name, job_id)
        return False

    def backend_job_id(self, workload_id: str) -> str | None:
        """Slurm's id for the job, if this process has submitted or seen it."""
        job_id = self._ids.get(workload_id)
        return None if job_id is None else str(job_id)

    async def status(self, workload_id: str) -> JobStatus:
        self._check_open()
        validate_workload_id(workload_id)
        job_id = self._ids.get(workload_id)
        record: JobRecord | None
        if job_id is not None:
            record = await self.client.job(job_id)
            if record is not None and record.name != workload_id:
                # A controller that lost its state numbers jobs from the start again: this
                # id is now another job's. Ours is gone, or known by name only.
                del self._ids[workload_id]
                record = await self._find(workload_id)
        else:
            record = await self._find(workload_id)
        if record is None:
            return JobStatus(JobState.UNKNOWN, message=f"Slurm knows no job {workload_id}")
        return job_status(record)

    async def cancel(self, workload_id: str) -> None:
        self._check_open()
        validate_workload_id(workload_id)
        job_id = self._ids.get(workload_id)
        if job_id is None:
            record = await self._find(workload_id)
            if record is None:
                return
            job_id = record.job_id
        await self.client.cancel(job_id)

    async def logs(self, workload_id: str, tail_bytes: int = 65536) -> bytes:
        self._check_open()
        validate_workload_id(workload_id)
        path = Path(output_path(self.settings, workload_id))
        return await asyncio.to_thread(_tail, path, max(0, min(tail_bytes, _MAX_TAIL)))

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.client.aclose()

    async def _find(self, name: str) -> JobRecord | None:
        """The newest job of that name Slurm still knows (GET /jobs, once per pass), noted
        in the cache."""
        listed = self._listed
        if listed is None:
            listed = {}
            for record in await self.client.jobs():
                if record.name not in listed or record.job_id > listed[record.name].job_id:
                    listed[record.name] = record
            if self._in_pass:
                self._listed = listed
        newest = listed.get(name)
        if newest is not None:
            self._ids[name] = newest.job_id
        return newest

    def _prepare_output_dir(self) -> None:
        # Where the job writes: it must exist on the node; on a single-node cluster (and
        # for tests) the gateway's machine is the node, so create it here when missing.
        os.makedirs(self.settings.output_dir, mode=0o755, exist_ok=True)

    def _check_open(self) -> None:
        if self._closed:
            raise BackendClosedError()


def _tail(path: Path, tail_bytes: int) -> bytes:
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - tail_bytes))
            return file.read(tail_bytes)
    except FileNotFoundError:
        return b""  # not started yet, or its output went elsewhere
