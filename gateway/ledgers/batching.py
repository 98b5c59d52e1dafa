"""Lua script calls to Redis, pipelined on one connection of the client's pool.

Each call is still one EVALSHA that Redis runs atomically on its own. What calls
share is the connection: the calls made in the same event-loop tick go out in one
write, a write never waits for the replies to earlier ones, and Redis answers in
order, so each reply goes to the oldest call still waiting. That removes most of
redis-py's per-call cost (a connection taken from the pool and given back, a
pipeline object, a syscall per call).

The connection comes from the client's pool, so redis-py makes it as the client
would (TLS, AUTH, SELECT, client name, timeouts); then the batcher puts its own
:class:`asyncio.Protocol` on the connection's transport. Replies are parsed by
hiredis as they arrive, inside the transport's callback, and each resolves its
caller's future there: no reader task and no stream buffer between the socket and
the caller (measured: a round trip 30-35 us shorter than through redis-py's reader).
The connection is closed before it goes back to the pool, which then makes a new
one when asked.

Rules:

1. The first call queued in a tick schedules a flush for the loop's next turn, which
   writes every call queued by then, in order, in one write. Commands are packed
   when queued: one that cannot be packed fails alone.
2. A reply goes to its caller. A Redis error for one call (``ResponseError``) goes to
   that caller only. When the connection fails (taking it, the server closing it,
   unreadable data, no reply within the pool's ``socket_timeout``), every call written
   on it and not yet answered gets that error, the connection goes back to the pool,
   and the next flush takes a fresh one.
3. A fresh connection first loads every ``preload`` script, so that calls queued in
   order run in order. NOSCRIPT later (the server lost its script cache: a restart,
   SCRIPT FLUSH) means the call did not run: the scripts are loaded again ahead of
   the next write, and the call is sent once more, after those queued meanwhile.
4. A caller that stopped waiting (cancelled) does not stop its call, which may be on
   the wire; its reply goes to the call's ``orphaned`` callback, so that, say, a
   reservation nobody will use can be given back.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import hiredis
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.typing import EncodableT, KeyT

__all__ = ["LuaScript", "ScriptBatcher"]

Orphaned = Callable[[Any], None]


@dataclass(frozen=True, slots=True)
class LuaScript:
    source: str
    sha: str

    @classmethod
    def of(cls, source: str) -> LuaScript:
        return cls(source, hashlib.sha1(source.encode()).hexdigest())


@dataclass(slots=True)
class _Call:
    script: LuaScript
    packed: bytes  # the EVALSHA command, as written
    future: asyncio.Future[Any]
    orphaned: Orphaned | None
    resent: bool = False


class ScriptBatcher:
    """Runs :class:`LuaScript` calls on one connection of ``client``'s pool, pipelined.

    Usage::

        batcher = ScriptBatcher(client)
        script = LuaScript.of("return redis.call('INCR', KEYS[1])")
        value = await batcher.call(script, ["counter"], [])
        await batcher.aclose()  # gives the connection back to the pool
    """

    def __init__(self, client: Redis, *, preload: Sequence[LuaScript] = ()) -> None:
        self._pool = client.connection_pool
        options = self._pool.connection_kwargs
        self._read_timeout: float | None = options.get("socket_timeout")
        self._decoding: dict[str, str] = (
            {
                "encoding": options.get("encoding", "utf-8"),
                "errors": options.get("encoding_errors", "strict"),
            }
            if options.get("decode_responses")
            else {}
        )
        self._preload = tuple(preload)
        self._to_load: tuple[LuaScript, ...] = ()  # before the next write's calls (rule 3)
        self._pending: list[_Call] = []
        self._flush_due = False
        self._link: _Link | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._drained: asyncio.Future[None] | None = None  # what aclose waits for

    def call(
        self,
        script: LuaScript,
        keys: Sequence[KeyT],
        args: Sequence[EncodableT],
        *,
        orphaned: Orphaned | None = None,
    ) -> asyncio.Future[Any]:
        """Queue one call; the future resolves to its reply (or the Redis error)."""
        future = asyncio.get_running_loop().create_future()
        try:
            packed = _pack("EVALSHA", script.sha, len(keys), *keys, *args)
        except (TypeError, ValueError) as err:  # 1: an argument hiredis cannot write
            future.set_exception(err)
            return future
        self._queue(_Call(script, packed, future, orphaned))
        return future

    async def aclose(self) -> None:
        """Wait until every call queued or on the wire is answered, then give the
        connection back to the pool."""
        while not self._idle():
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        link, self._link = self._link, None
        if link is not None:
            await self._retire(link)

    # -- writing ------------------------------------------------------------------------

    def _queue(self, call: _Call) -> None:
        self._pending.append(call)
        if not self._flush_due:  # 1
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_due = False
        if not self._pending:
            return
        link = self._link
        if link is None:
            if self._connecting is None:  # it flushes once connected
                self._connecting = self._spawn(self._connect())
            return
        batch, self._pending = self._pending, []
        loads = [_pack("SCRIPT", "LOAD", script.source) for script in self._to_load]
        self._to_load = ()
        link.write(loads, batch)

    async def _connect(self) -> None:
        try:
            link = await self._take_link()
        except asyncio.CancelledError:  # the loop is closing: nobody may wait for ever
            self._connecting = None
            self._fail_pending(asyncio.CancelledError())
            raise
        except Exception as err:  # noqa: BLE001 - rule 2: whatever it is, each caller hears it
            self._connecting = None
            self._fail_pending(err)
            return
        self._connecting = None
        self._link = link
        self._to_load = _union(self._preload, self._to_load)  # 3
        self._flush()

    async def _take_link(self) -> _Link:
        connection: AbstractConnection = await self._pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            return _Link.take_over(connection, self)
        except BaseException:
            await self._pool.release(connection)
            raise

    # -- answering (called by the link, from the transport's callbacks) -----------------

    def _answer(self, call: _Call | None, reply: Any) -> None:
        if call is None:  # a script loaded; had it failed, its calls hear NOSCRIPT
            return
        if isinstance(reply, NoScriptError) and not call.resent:  # 3
            call.resent = True
            self._to_load = _union(self._preload, self._to_load, (call.script,))
            self._queue(call)
        elif not call.future.done():
            if isinstance(reply, Exception):
                call.future.set_exception(reply)
            else:
                call.future.set_result(reply)
        elif call.orphaned is not None and not isinstance(reply, Exception):  # 4
            call.orphaned(reply)

    def _break(self, link: _Link, err: BaseException) -> None:
        """The connection failed: everyone waiting on it hears ``err``; it goes back to
        the pool, and the next flush takes another."""
        if self._link is not link:
            return  # broken already
        self._link = None
        _tell([call for call in link.unanswered if call is not None], err)
        link.unanswered.clear()
        self._spawn(self._retire(link))
        if self._pending:
            self._flush()
        self._wake_closer()

    def _wake_closer(self) -> None:
        if self._drained is not None and not self._drained.done() and self._idle():
            self._drained.set_result(None)

    # -- internals ----------------------------------------------------------------------

    def _idle(self) -> bool:
        link = self._link
        return (
            not self._pending and self._connecting is None and (link is None or not link.unanswered)
        )

    def _fail_pending(self, err: BaseException) -> None:
        batch, self._pending = self._pending, []
        _tell(batch, err)
        self._wake_closer()

    async def _retire(self, link: _Link) -> None:
        link.stop()
        await link.connection.disconnect(nowait=True)
        await self._pool.release(link.connection)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


class _Link(asyncio.Protocol):
    """A pool connection whose transport now talks to the batcher: what was written on
    it, oldest first, not yet answered (``None``: a SCRIPT LOAD, whose reply nobody
    waits for), and the parser of what comes back."""

    def __init__(
        self,
        connection: AbstractConnection,
        transport: asyncio.Transport,
        streams: asyncio.BaseProtocol,
        batcher: ScriptBatcher,
    ) -> None:
        self.connection = connection
        self.unanswered: deque[_Call | None] = deque()
        self._transport = transport
        self._streams = streams  # redis-py's protocol, told when the connection closes
        self._batcher = batcher
        self._replies = hiredis.Reader(
            protocolError=InvalidResponse, replyError=_reply_error, **batcher._decoding
        )
        self._deadline: asyncio.TimerHandle | None = None

    @classmethod
    def take_over(cls, connection: AbstractConnection, batcher: ScriptBatcher) -> _Link:
        # redis-py keeps the connection's stream writer in ``_writer``; there is no
        # public way to its transport (tests/ledgers/test_batching.py checks this).
        writer = getattr(connection, "_writer", None)
        if not isinstance(writer, asyncio.StreamWriter):
            raise RedisConnectionError("the pool gave a connection without a stream writer")
        transport = writer.transport
        link = cls(connection, transport, transport.get_protocol(), batcher)  # type: ignore[arg-type]
        transport.set_protocol(link)
        return link

    def write(self, loads: list[bytes], calls: list[_Call]) -> None:
        self.unanswered.extend([None] * len(loads))
        self.unanswered.extend(calls)
        self._transport.write(b"".join([*loads, *(call.packed for call in calls)]))
        if self._deadline is None:
            self._arm()

    def stop(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    # -- asyncio.Protocol -----------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._replies.feed(data)
        try:
            while (reply := self._replies.gets()) is not False:
                if not self.unanswered:
                    raise InvalidResponse(f"a reply nobody asked for: {reply!r}")
                self._batcher._answer(self.unanswered.popleft(), reply)
        except InvalidResponse as err:
            self._transport.abort()
            self._batcher._break(self, err)
            return
        self.stop()
        if self.unanswered:
            self._arm()
        else:
            self._batcher._wake_closer()

    def eof_received(self) -> bool:
        return False  # the transport closes itself, then connection_lost

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop()
        self._streams.connection_lost(exc)
        reason = "Connection closed by server." if exc is None else f"Connection lost: {exc}"
        self._batcher._break(self, RedisConnectionError(reason))

    # -- internals ----------------------------------------------------------------------

    def _arm(self) -> None:
        """No reply for the pool's ``socket_timeout`` while calls wait: the link is dead."""
        timeout = self._batcher._read_timeout
        if timeout is not None:
            self._deadline = asyncio.get_running_loop().call_later(timeout, self._expire)

    def _expire(self) -> None:
        self._deadline = None
        self._transport.abort()
        self._batcher._break(self, RedisTimeoutError("Timeout reading from Redis"))


def _pack(*command: Any) -> bytes:  # Any: hiredis's stub takes a command for a 1-tuple
    packed: bytes = hiredis.pack_command(command)
    return packed


def _reply_error(message: str) -> ResponseError:
    if message.startswith("NOSCRIPT"):
        return NoScriptError(message)
    return ResponseError(message)


def _tell(calls: Sequence[_Call], err: BaseException) -> None:
    for call in calls:
        if call.future.done():
            continue
        if isinstance(err, asyncio.CancelledError):
            call.future.cancel()
        else:
            call.future.set_exception(err)


def _union(*groups: Sequence[LuaScript]) -> tuple[LuaScript, ...]:
    return tuple(dict.fromkeys(script for group in groups for script in group))
