"""Lua script calls made in the same event-loop tick, sent to Redis as one pipeline.

Each call is still one EVALSHA that Redis runs atomically on its own; what is
shared is the round trip: a connection taken from the pool once, one write, the
replies read in order. Under concurrency that removes most of redis-py's per-call
cost (pool, retries, a syscall per call); a lone call waits for nothing but the
next turn of the loop.

Rules:

1. The first call of a tick starts a flush task; every call queued before it runs
   rides along (at most ``max_batch`` per pipeline, more pipelines if needed).
2. A reply is handed to its caller; a Redis error for one call (``ResponseError``)
   goes to that caller only; a failure of the round trip itself (a connection error,
   anything else) goes to every caller of the batch.
3. The first pipeline loads every script given as ``preload`` ahead of its calls,
   so that calls queued in order run in order. NOSCRIPT later (the server lost its
   script cache: a restart, SCRIPT FLUSH) means the call did not run: its script is
   loaded and those calls sent again, once, after the rest of their batch.
4. A caller that stopped waiting (cancelled) does not stop its call, which may
   already be on the wire; its reply goes to the call's ``orphaned`` callback, so
   that, say, a reservation nobody will use can be given back.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError
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


class ScriptBatcher:
    """Runs :class:`LuaScript` calls on ``client``, batched per event-loop tick.

    Usage::

        batcher = ScriptBatcher(client)
        script = LuaScript.of("return redis.call('INCR', KEYS[1])")
        value = await batcher.call(script, ["counter"], [])
    """

    def __init__(
        self, client: Redis, *, preload: Sequence[LuaScript] = (), max_batch: int = 256
    ) -> None:
        self._client = client
        self._max_batch = max_batch
        self._preload = tuple(preload)
        self._pending: list[_Call] = []
        self._flushing: set[asyncio.Task[None]] = set()

    def call(
        self,
        script: LuaScript,
        keys: Sequence[KeyT],
        args: Sequence[EncodableT],
        *,
        orphaned: Orphaned | None = None,
    ) -> asyncio.Future[Any]:
        """Queue one call; the future resolves to its reply (or the Redis error)."""
        loop = asyncio.get_running_loop()
        if not self._pending:
            task = loop.create_task(self._flush())
            self._flushing.add(task)
            task.add_done_callback(self._flushing.discard)
        future = loop.create_future()
        self._pending.append(_Call(script, (len(keys), *keys, *args), future, orphaned))
        return future

    async def aclose(self) -> None:
        """Wait for the batches already queued or on the wire."""
        while self._flushing:
            await asyncio.gather(*self._flushing, return_exceptions=True)

    async def _flush(self) -> None:
        batch, self._pending = self._pending, []
        size = self._max_batch
        await asyncio.gather(*(self._send(batch[i : i + size]) for i in range(0, len(batch), size)))

    async def _send(self, batch: list[_Call]) -> None:
        try:
            replies = await self._replies(batch)
        except asyncio.CancelledError:  # the loop is closing: nobody may wait for ever
            for call in batch:
                call.future.cancel()
            raise
        except Exception as err:  # noqa: BLE001 - rule 2: whatever it is, each caller hears it
            replies = [err] * len(batch)
        orphans = []
        for call, reply in zip(batch, replies, strict=True):
            if not call.future.done():
                if isinstance(reply, Exception):
                    call.future.set_exception(reply)
                else:
                    call.future.set_result(reply)
            elif call.orphaned is not None and not isinstance(reply, Exception):
                orphans.append((call.orphaned, reply))
        for orphaned, reply in orphans:  # 4, once every caller has its answer
            orphaned(reply)

    async def _replies(self, batch: list[_Call]) -> list[Any]:
        replies = await self._execute(batch)
        lost = [n for n, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if lost:  # 3
            for script in {batch[n].script for n in lost}:
                await self._client.script_load(script.source)
            again = await self._execute([batch[n] for n in lost])
            for n, reply in zip(lost, again, strict=True):
                replies[n] = reply
        return replies

    async def _execute(self, batch: list[_Call]) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        preload, self._preload = self._preload, ()
        for script in preload:
            pipe.execute_command("SCRIPT LOAD", script.source)
        for call in batch:
            pipe.execute_command("EVALSHA", call.script.sha, *call.args)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
        return replies[len(preload) :]
