"""A TCP relay on 127.0.0.1 in front of a real server, which a test can take down
(connections cut, new ones refused) and bring back on the same port: a dependency
that becomes unreachable without stopping a server other tests may share."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress

__all__ = ["Relay", "relay"]


class Relay:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.frozen = False
        # Set: a request whose first bytes are one of these is passed on, and its reply is
        # held back (never passed): a server that did the work and whose answer is late.
        self.hold_replies_to: tuple[bytes, ...] = ()

    async def start(self) -> None:
        """Listen (again, on the same port once it has one)."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Refuse new connections and cut the open ones."""
        if self._server is not None:
            self._server.close()
            for writer in self._writers:
                writer.transport.abort()
            self._writers.clear()
            await self._server.wait_closed()
            self._server = None

    def freeze(self) -> None:
        """Cut the open connections, then accept new ones and answer nothing on them:
        a server that is there but does not answer (frozen, or a network that drops)."""
        self.frozen = True
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    def thaw(self) -> None:
        self.frozen = False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.frozen:
            self._writers.add(writer)
            await reader.read()  # until the client gives up; nothing is ever passed on
            self._writers.discard(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        holding = asyncio.Event()

        def sent(data: bytes) -> None:
            if self.hold_replies_to and data.startswith(self.hold_replies_to):
                holding.set()

        await asyncio.gather(
            _pipe(reader, up_writer, sent),
            _pipe(up_reader, writer, held=holding),
            return_exceptions=True,
        )
        self._writers -= {writer, up_writer}


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    sent: Callable[[bytes], None] | None = None,
    held: asyncio.Event | None = None,
) -> None:
    with suppress(OSError):
        while data := await reader.read(65536):
            if sent is not None:
                sent(data)
            if held is not None and held.is_set():
                continue  # the reply is swallowed: the client waits until it gives up
            writer.write(data)
            await writer.drain()
    writer.close()


@asynccontextmanager
async def relay(upstream_host: str, upstream_port: int) -> AsyncIterator[Relay]:
    """A started relay to ``upstream_host:upstream_port``, stopped on exit."""
    running = Relay(upstream_host, upstream_port)
    await running.start()
    try:
        yield running
    finally:
        await running.stop()
