"""Lua script calls to Redis, pipelined on one connection of the client's pool.

Each call is still one EVALSHA that Redis runs atomically on its own. What calls
share is the connection: the calls made in the same event-loop tick go out in one
write, a write never waits for the replies to earlier ones, and Redis answers in
order, so one reader hands each reply to its caller. That removes most of redis-py's
per-call cost (a connection taken from the pool and given back, a pipeline object,
a syscall per call), and a lone call goes out as soon as the loop turns.

Rules:

1. The first call queued in a tick starts a flush, which writes every call queued by
   then, in order, after any write still under way (one writer at a time).
2. A reply goes to its caller. A Redis error for one call (``ResponseError``) goes to
   that caller only. When the connection fails (taking it, writing, reading, a read
   timeout), every call written on it and not yet answered gets that error, the
   connection goes back to the pool, and the next flush takes a fresh one.
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
from redis.exceptions import NoScriptError, ResponseError
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
    args: tuple[EncodableT | KeyT, ...]  # key count, keys, then arguments
    future: asyncio.Future[Any]
    orphaned: Orphaned | None
    resent: bool = False


@dataclass(slots=True)
class _Link:
    """A connection taken from the pool and what was written on it, oldest first, not
    yet answered (``None``: a SCRIPT LOAD, whose reply nobody waits for)."""

    connection: AbstractConnection
    unanswered: deque[_Call | None]
    reader: asyncio.Task[None] | None = None


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
        self._preload = tuple(preload)
        self._to_load: tuple[LuaScript, ...] = ()  # before the next write's calls (rule 3)
        self._pending: list[_Call] = []
        self._link: _Link | None = None
        self._writing = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

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
        self._queue(_Call(script, (len(keys), *keys, *args), future, orphaned))
        return future

    async def aclose(self) -> None:
        """Wait until every call queued or on the wire is answered, then give the
        connection back to the pool."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        link, self._link = self._link, None
        if link is not None:
            await self._pool.release(link.connection)

    # -- writing ------------------------------------------------------------------------

    def _queue(self, call: _Call) -> None:
        if not self._pending:  # 1
            self._spawn(self._flush())
        self._pending.append(call)

    async def _flush(self) -> None:
        async with self._writing:
            batch, self._pending = self._pending, []
            if not batch:  # an earlier flush, waiting for the lock meanwhile, took them
                return
            link = None
            try:
                # hiredis packs exactly as redis-py does (UTF-8 for text), in C: 2 us,
                # not 11; first, so that an argument it refuses fails its batch only
                packed = [_pack("EVALSHA", call.script.sha, *call.args) for call in batch]
                link = await self._usable_link()
                await self._write(link, batch, packed)
            except asyncio.CancelledError:  # the loop is closing: nobody may wait for ever
                self._fail(link, batch, asyncio.CancelledError())
                raise
            except Exception as err:  # noqa: BLE001 - rule 2: whatever it is, each caller hears it
                self._fail(link, batch, err)

    async def _usable_link(self) -> _Link:
        link = self._link
        if link is not None and link.reader is None and await _closed(link.connection):
            # The server closed it while it was idle (a restart, a timeout, CLIENT KILL),
            # which the pool would notice too: take another rather than fail a call.
            self._link = None
            self._spawn(self._retire(link))
            link = None
        return link if link is not None else await self._connect()

    async def _connect(self) -> _Link:
        connection: AbstractConnection = await self._pool.get_connection()  # type: ignore[no-untyped-call]
        link = self._link = _Link(connection, deque())
        self._to_load = _union(self._preload, self._to_load)  # 3
        return link

    async def _write(self, link: _Link, batch: list[_Call], packed: list[bytes]) -> None:
        loads = [_pack("SCRIPT", "LOAD", script.source) for script in self._to_load]
        self._to_load = ()
        link.unanswered.extend([None] * len(loads))
        link.unanswered.extend(batch)
        if link.reader is None:
            link.reader = self._spawn(self._read(link))
        await link.connection.send_packed_command(loads + packed, check_health=False)

    # -- reading ------------------------------------------------------------------------

    async def _read(self, link: _Link) -> None:
        """Hand out replies while calls written on ``link`` wait for them."""
        unanswered = link.unanswered
        try:
            while unanswered:
                try:
                    reply: Any = await link.connection.read_response()
                except ResponseError as err:  # 2: that call's own error
                    reply = err
                if unanswered:  # else the link broke meanwhile and told everyone
                    self._answer(unanswered.popleft(), reply)
        except asyncio.CancelledError:
            self._break(link, asyncio.CancelledError())
            raise
        except Exception as err:  # noqa: BLE001 - rule 2: whatever it is, each caller hears it
            self._break(link, err)
        finally:
            link.reader = None

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

    # -- failing ------------------------------------------------------------------------

    def _fail(self, link: _Link | None, batch: list[_Call], err: BaseException) -> None:
        if link is None:  # nothing was written: only this batch hears it
            _tell(batch, err)
        else:
            self._break(link, err)

    def _break(self, link: _Link, err: BaseException) -> None:
        """The connection failed: everyone waiting on it hears ``err``; it goes back to
        the pool once its reader has stopped, and the next flush takes another."""
        if self._link is not link:
            return  # broken already
        self._link = None
        calls = [call for call in link.unanswered if call is not None]
        link.unanswered.clear()
        _tell(calls, err)
        self._spawn(self._retire(link))

    async def _retire(self, link: _Link) -> None:
        if link.reader is not None:  # it reads from the connection until it stops
            await asyncio.gather(link.reader, return_exceptions=True)
        await link.connection.disconnect(nowait=True)
        await self._pool.release(link.connection)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _pack(*command: Any) -> bytes:  # Any: hiredis's stub takes a command for a 1-tuple
    packed: bytes = hiredis.pack_command(command)
    return packed


def _tell(calls: Sequence[_Call], err: BaseException) -> None:
    for call in calls:
        if call.future.done():
            continue
        if isinstance(err, asyncio.CancelledError):
            call.future.cancel()
        else:
            call.future.set_exception(err)


async def _closed(connection: AbstractConnection) -> bool:
    """Whether an idle connection is done for: at EOF, or holding data nobody asked for."""
    try:
        return await connection.can_read()
    except (RedisConnectionError, OSError):
        return True


def _union(*groups: Sequence[LuaScript]) -> tuple[LuaScript, ...]:
    return tuple(dict.fromkeys(script for group in groups for script in group))
