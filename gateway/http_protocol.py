"""uvicorn's HTTP/1.1 protocol (httptools) with a response's head and body in one write.

uvicorn writes a response's status line and headers as soon as the app sends
``http.response.start``, and the body on ``http.response.body``: two ``send()`` calls,
and often two packets for the client to wake up for, where one would do (measured at
about 3% of the gateway's CPU under load). Here a head waits for the next write on its
connection, which is its body when the app sends both in one go, as the gateway's
routes do. Nothing waits longer than the current turn of the event loop: what is held
goes out with the next write, when the loop turns, or before the connection closes.

Use it with ``uvicorn.run(app, http=JoiningHttpToolsProtocol)``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from gateway.errors import error_body

__all__ = ["CLOSING", "JoiningHttpToolsProtocol", "JoiningTransport"]

# A response that never ends by itself (an event stream) puts an ``asyncio.Event``
# under this key of its ASGI scope; the server sets it when it shuts down, so the
# response can end cleanly instead of holding the shutdown up (uvicorn waits for every
# response in progress before it stops).
CLOSING = "ignara.closing"

_HEAD = b"HTTP/1.1 "  # how uvicorn's status lines, and so its heads, begin


class JoiningTransport:
    """Wraps a transport: a write that starts a response is held for the next one.

    Only ``write`` and ``close`` differ; everything else is the wrapped transport's.
    Order is kept: any write releases what is held first, in the same ``send()``.
    """

    __slots__ = ("_held", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif data.startswith(_HEAD):
            self._held = data
            asyncio.get_running_loop().call_soon(self.release)
        else:
            self._transport.write(data)

    def release(self) -> None:
        """Write what is held, if anything (nothing once the connection is closing)."""
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.release()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class JoiningHttpToolsProtocol(HttpToolsProtocol):
    """:class:`HttpToolsProtocol` writing through a :class:`JoiningTransport`, and
    answering a request it cannot parse (a malformed header, a bogus
    ``Transfer-Encoding``) with the gateway's JSON error, not uvicorn's plain text."""

    def send_400_response(self, msg: str) -> None:
        message = f"not a valid HTTP/1.1 request: {msg.rstrip('.')}"
        body = json.dumps(error_body(400, "invalid_request", message)).encode()
        content = [STATUS_LINE[400]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(cast(asyncio.Transport, JoiningTransport(transport)))

    def shutdown(self) -> None:
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            closing = cast(dict[str, Any], cycle.scope).get(CLOSING)
            if isinstance(closing, asyncio.Event):
                closing.set()
        super().shutdown()
