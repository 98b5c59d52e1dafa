"""An async client for Ray's Jobs REST API: the few calls the adapter makes, errors mapped.

Ray answers failures in plain text, often a whole Python traceback (shared/notes/backends.md
§2): those never reach a message as they are; a message carries what the gateway was
doing, the HTTP status and at most the traceback's last line, bounded. A Ray that cannot be
reached, times out or answers 429/5xx from a proxy is a :class:`BackendUnavailableError`:
the workload waits and the call is retried. A token, when the cluster wants one, is sent
as a bearer token and never logged or put in a message.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from gateway.backends.base import (
    BackendError,
    BackendUnavailableError,
    JobRejectedError,
)
from gateway.backends.ray.mapping import RayJobInfo, RayJobRequest, read_job_info

__all__ = [
    "RayClient",
    "RayError",
    "RayJobExistsError",
    "RayJobNotFoundError",
    "error_for",
    "said",
]

_MAX_SAID = 200


class RayError(BackendError):
    """Ray refused a call for a reason not known to be lasting (the workload waits)."""

    code = "ray_error"


class RayJobNotFoundError(RayError):
    """Ray knows no job of that submission id (HTTP 404)."""

    code = "ray_job_not_found"


class RayJobExistsError(RayError):
    """A job of that submission id already exists (Ray's 500 "already exists")."""

    code = "ray_job_exists"


def said(text: str) -> str:
    """What Ray said, fit for a message: the last non-empty line (a traceback's exception
    line), printable characters only, bounded."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return "".join(c for c in last if c.isprintable())[:_MAX_SAID] or "no reason given"


def error_for(action: str, status: int, text: str) -> BackendError:
    """The error for a failed call (``action``: what the gateway was doing)."""
    if status in (401, 403):
        return BackendUnavailableError(
            f"Ray refused the gateway's credentials while {action} (HTTP {status}): "
            "check the token in the backend's token_env"
        )
    if status == 404:
        return RayJobNotFoundError(f"Ray knows no such job while {action}")
    if status == 500 and "already exists" in text:
        return RayJobExistsError(f"the job already exists on Ray while {action}")
    if status == 400:
        # Ray could not read the request (an unknown or mistyped field): sending the same
        # job again cannot help.
        return JobRejectedError(f"Ray rejects the job while {action} (HTTP 400: {said(text)})")
    if status in (408, 429) or status >= 502:
        return BackendUnavailableError(f"Ray is unavailable while {action} (HTTP {status})")
    return RayError(f"Ray failed while {action} (HTTP {status}: {said(text)})")


class RayClient:
    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        token_required: bool = False,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self._token_required = token_required
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport
        )

    async def _call(self, action: str, method: str, path: str, **kwargs: Any) -> Any:
        if self._token_required and not self._token:
            raise BackendUnavailableError(
                f"no Ray token on this gateway while {action}: set the variable the "
                "backend's token_env names"
            )
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as err:
            # The exception's type only: keep messages small, plain and free of requests.
            raise BackendUnavailableError(
                f"cannot reach Ray at {self.url} while {action} ({type(err).__name__})"
            ) from None
        if response.status_code != 200:
            raise error_for(action, response.status_code, response.text)
        try:
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise RayError(f"Ray answered {action} with something not JSON") from None

    async def version(self) -> str:
        body = await self._call("asking its version", "GET", "/api/version")
        return str(body.get("ray_version", "")) if isinstance(body, dict) else ""

    async def submit(self, request: RayJobRequest) -> None:
        await self._call(
            f"submitting job {request.submission_id}",
            "POST",
            "/api/jobs/",
            json=request.body(),
        )

    async def job(self, submission_id: str) -> RayJobInfo | None:
        """The job, or ``None`` when Ray does not (or no longer) know it."""
        try:
            body = await self._call(
                f"reading job {submission_id}", "GET", f"/api/jobs/{submission_id}"
            )
        except RayJobNotFoundError:
            return None
        info = read_job_info(body)
        if info is None:
            raise RayError(f"Ray answered reading job {submission_id} with an unreadable job")
        return info

    async def stop(self, submission_id: str) -> bool:
        """Ask Ray to stop the job; ``False`` when it had already ended or is unknown.
        A pending job is *not* cancelled by this (see RayBackend)."""
        try:
            body = await self._call(
                f"stopping job {submission_id}", "POST", f"/api/jobs/{submission_id}/stop"
            )
        except RayJobNotFoundError:
            return False
        return isinstance(body, dict) and body.get("stopped") is True

    async def logs(self, submission_id: str) -> str:
        try:
            body = await self._call(
                f"reading the logs of job {submission_id}",
                "GET",
                f"/api/jobs/{submission_id}/logs",
            )
        except RayJobNotFoundError:
            return ""
        logs = body.get("logs") if isinstance(body, dict) else None
        return logs if isinstance(logs, str) else ""

    async def aclose(self) -> None:
        await self._http.aclose()
