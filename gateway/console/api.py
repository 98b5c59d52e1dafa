"""The console's only way to read or change anything: the public API, called in-process
as the session's actor (:mod:`gateway.auth.actor`), whom the API authenticates on every
call as it would the key itself, so a page can do exactly what that key may do over HTTP."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import httpx
from litestar.types import ASGIApp, Receive, Scope, Send

from gateway.auth.actor import ACTOR_SCOPE_KEY, SessionActor

__all__ = ["Answer", "ConsoleApi"]

_BASE = "http://console.internal"


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: Any  # the decoded JSON, or None
    etag: str | None = None  # the object's version, where the API tags it

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def error(self) -> str:
        """The API's error message (its JSON error body), for people."""
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return str(self.body["error"].get("message") or self.body["error"].get("code"))
        return f"the API answered {self.status}"


class ConsoleApi:
    """Calls ``/api/v1/...`` on ``app`` as ``actor``."""

    def __init__(self, app: ASGIApp, actor: SessionActor) -> None:
        self._app = app
        self._actor = actor

    async def _as_actor(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[ACTOR_SCOPE_KEY] = self._actor  # type: ignore[literal-required]
        await self._app(scope, receive, send)

    async def call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        if not path.startswith("/api/v1/"):
            raise ValueError(f"the console calls only the /api/v1 API, not {path!r}")
        # httpx types an ASGI app more loosely than Litestar: the same callable.
        transport = httpx.ASGITransport(app=cast("Any", self._as_actor))
        async with httpx.AsyncClient(transport=transport, base_url=_BASE) as client:
            response = await client.request(
                method,
                path,
                params=params,
                json=json,
                headers=headers,
            )
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = None
        return Answer(response.status_code, body, response.headers.get("etag"))

    async def get(self, path: str, **params: str) -> Answer:
        return await self.call("GET", path, params=params or None)
