"""An async slurmrestd client: the few calls the adapter makes, errors mapped (errors.py).

Every call carries ``X-SLURM-USER-NAME`` / ``X-SLURM-USER-TOKEN``; the token is never
logged or put in a message. A slurmrestd that cannot be reached, or times out, is a
:class:`BackendUnavailableError`: the workload waits and the call is retried.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from gateway.backends.base import BackendUnavailableError
from gateway.backends.slurm.errors import SlurmError, SlurmJobNotFoundError, error_for
from gateway.backends.slurm.wire import JobRecord, JobRequest, WireError, WireFormat

__all__ = ["SlurmClient"]

T = TypeVar("T")


class SlurmClient:
    def __init__(
        self,
        url: str,
        *,
        user: str,
        token: str | None,
        wire: WireFormat,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.wire = wire
        self._token = token
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers={"X-SLURM-USER-NAME": user, "Content-Type": "application/json"},
            timeout=timeout,
            transport=transport,
        )

    async def _call(self, action: str, method: str, path: str, **kwargs: Any) -> bytes:
        if not self._token:
            raise BackendUnavailableError(
                f"no Slurm token on this gateway while {action}: set the variable the "
                "backend's token_env names"
            )
        try:
            response = await self._http.request(
                method, path, headers={"X-SLURM-USER-TOKEN": self._token}, **kwargs
            )
        except httpx.HTTPError as err:
            # The exception's type only: its text may carry the request (never the token,
            # which is a header, but keep messages small and plain).
            raise BackendUnavailableError(
                f"cannot reach slurmrestd at {self.url} while {action} ({type(err).__name__})"
            ) from None
        if response.status_code != 200:
            raise error_for(
                action,
                response.status_code,
                self.wire.errors(response.content),
                response.text[:200],
            )
        # 22.05 answers some refusals with 200 and a non-empty errors list.
        if errors := self.wire.errors(response.content):
            raise error_for(action, 500, errors, "")
        return response.content

    async def ping(self) -> None:
        await self._call("pinging", "GET", self.wire.ping_path())

    async def submit(self, request: JobRequest) -> int:
        body = await self._call(
            f"submitting job {request.name}",
            "POST",
            self.wire.submit_path(),
            json=self.wire.submit_body(request),
        )
        return self._read(lambda: self.wire.submitted_job_id(body))

    async def jobs(self) -> list[JobRecord]:
        body = await self._call("listing jobs", "GET", self.wire.jobs_path())
        return self._read(lambda: self.wire.job_records(body))

    async def job(self, job_id: int) -> JobRecord | None:
        """The job, or ``None`` when Slurm no longer (or never) knew it."""
        try:
            body = await self._call(f"reading job {job_id}", "GET", self.wire.job_path(job_id))
        except SlurmJobNotFoundError:
            return None
        records = [r for r in self._read(lambda: self.wire.job_records(body)) if r.job_id == job_id]
        return records[0] if records else None

    async def cancel(self, job_id: int) -> None:
        """Cancel the job (Slurm sends SIGTERM, then SIGKILL after its KillWait); a job
        that is gone or already ended is not an error."""
        try:
            await self._call(f"cancelling job {job_id}", "DELETE", self.wire.job_path(job_id))
        except SlurmJobNotFoundError:
            return

    async def aclose(self) -> None:
        await self._http.aclose()

    @staticmethod
    def _read(read: Callable[[], T]) -> T:
        try:
            return read()
        except WireError as err:
            raise SlurmError(str(err)) from None
