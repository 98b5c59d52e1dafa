"""The console's live updates: the API's event stream (``GET /api/v1/admin/events``,
Server-Sent Events) relayed to the browser, called in-process as the session's actor as
every other console call is, so the browser never holds a key and sees exactly the
events that key may see.

httpx's ASGI transport reads a whole answer before returning it, which an endless
stream never ends, so this speaks ASGI to the app directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from litestar.types import ASGIApp

from gateway.auth.actor import ACTOR_SCOPE_KEY, SessionActor

__all__ = ["EVENTS_PATH", "Refusal", "Relay", "notice"]

EVENTS_PATH = "/api/v1/admin/events"
_STOP_SECONDS = 5.0
_REFUSAL_BYTES = 4096  # the most of a refusal's body read (the API's errors are short)
# Refusals that pass (a limit reached, the live state or the database away): the page
# asks again after the API's Retry-After, or a minute, within these bounds.
_PASSING = frozenset({429, 500, 502, 503, 504})
_RETRY_SECONDS = (5, 60, 600)  # least, without a Retry-After, most


@dataclass(frozen=True)
class Refusal:
    """Why the API gave no stream: its status, its error's code and message, and its
    ``Retry-After`` in seconds (``None`` when it gave none)."""

    status: int
    error: str
    message: str
    retry_after: int | None


class Relay:
    """One relayed stream: :meth:`start` returns the API's status; when it is 200,
    :meth:`chunks` yields the body as it comes, and stops the API's side when the
    browser goes (its iterator closed); when not, :attr:`refusal` says why."""

    def __init__(
        self,
        app: ASGIApp,
        actor: SessionActor,
        *,
        path: str = EVENTS_PATH,
        last_event_id: str | None,
    ) -> None:
        headers = [
            (b"accept", b"text/event-stream"),
            (b"host", b"console.internal"),
        ]
        if last_event_id:
            headers.append((b"last-event-id", last_event_id.encode("latin-1", "replace")))
        self._scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 0),
            "server": ("console.internal", 80),
            "state": {},
            ACTOR_SCOPE_KEY: actor,
        }
        self._app = app
        self._queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize=64)
        self._gone = asyncio.Event()
        self._requested = False
        self._task: asyncio.Task[None] | None = None
        self.refusal: Refusal | None = None

    async def start(self) -> int:
        """Call the API and wait for its answer's status. Other than 200, the API's
        reason is kept in :attr:`refusal`."""
        self._task = asyncio.create_task(self._run())
        while True:
            message = await self._queue.get()
            if message is None:
                self.refusal = Refusal(502, "unavailable", "the stream ended unanswered", None)
                return 502
            if message["type"] == "http.response.start":
                status: int = message["status"]
                if status != 200:
                    self.refusal = await self._refusal(status, message.get("headers", []))
                    await self.close()
                return status

    async def _refusal(self, status: int, headers: list[tuple[bytes, bytes]]) -> Refusal:
        body = b""
        while len(body) < _REFUSAL_BYTES:
            message = await self._queue.get()
            if message is None or message["type"] != "http.response.body":
                break
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        try:
            answer = json.loads(body[:_REFUSAL_BYTES])
        except ValueError:
            answer = None
        # The API's errors: {"error": {"code", "message", "type"}} (gateway.errors).
        error = answer.get("error") if isinstance(answer, dict) else None
        if not isinstance(error, dict):
            error = {}
        retry = dict(headers).get(b"retry-after", b"")
        return Refusal(
            status,
            str(error.get("code") or "unavailable"),
            str(error.get("message") or f"the event stream answered {status}"),
            int(retry) if retry.isdigit() else None,
        )

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            while True:
                message = await self._queue.get()
                if message is None or message["type"] != "http.response.body":
                    return
                body: bytes = message.get("body", b"")
                if body:
                    yield body
                if not message.get("more_body", False):
                    return
        finally:
            await self.close()

    async def close(self) -> None:
        """Tell the API the client is gone, and wait (a while) for it to stop."""
        self._gone.set()
        if self._task is None or self._task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), _STOP_SECONDS)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        try:
            # ASGI's message types are TypedDicts: plain dicts here, as the app sends them.
            app: Any = self._app
            await app(self._scope, self._receive, self._send)
        finally:
            with contextlib.suppress(asyncio.QueueFull):
                self._queue.put_nowait(None)

    async def _receive(self) -> dict[str, Any]:
        if not self._requested:
            self._requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        if self._gone.is_set():
            return  # nobody reads any more
        await self._queue.put(message)


def notice(refusal: Refusal) -> bytes:
    """A refusal as an event stream for the page: one ``unavailable`` event (status,
    error, message, and whether the page will ask again) and, if it will, ``retry:``
    for when. EventSource asks again when a stream ends; the page's script stops it
    after a refusal that will not pass (see ``static/console.js``)."""
    again = refusal.status in _PASSING
    data = json.dumps(
        {
            "status": refusal.status,
            "error": refusal.error,
            "message": refusal.message,
            "retry": again,
        }
    )
    least, usual, most = _RETRY_SECONDS
    seconds = min(max(refusal.retry_after or usual, least), most)
    retry = f"retry: {seconds * 1000}\n\n" if again else ""
    return f"{retry}event: unavailable\ndata: {data}\n\n".encode()
