"""The authenticator's key store over SQL (tenants' API key rows)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import datetime

from gateway.auth.errors import DatabaseUnavailableError
from gateway.auth.identity import ANY_TENANT
from gateway.auth.keys import ApiKeyStore, StoredKey
from gateway.outages import DATABASE_ERRORS, Outage, database_unavailable
from tenants import Database
from tenants.services.api_keys import find_api_key, key_limits_of, touch_api_key

__all__ = ["CachedApiKeyStore", "SqlApiKeyStore"]


class SqlApiKeyStore:
    def __init__(self, database: Database) -> None:
        self.database = database

    async def get(self, key_id: str) -> StoredKey | None:
        async with self.database.session() as session:
            found = await find_api_key(session, key_id)
        if found is None:
            return None
        key, principal = found
        return StoredKey(
            key_id=key.key_id,
            tenant=ANY_TENANT if key.tenant is None else key.tenant,
            principal=principal.name,
            secret_hash=key.secret_hash,
            roles=frozenset(key.roles),
            scopes=frozenset(key.scopes),
            expires_at=key.expires_at,
            # A disabled principal's keys are as good as revoked.
            revoked_at=key.revoked_at or principal.disabled_at,
            previous_secret_hash=key.previous_secret_hash,
            previous_valid_until=key.previous_valid_until,
            limits=tuple(key_limits_of(key).items()),
        )

    async def touch(self, key_id: str, when: datetime) -> None:
        async with self.database.session() as session:
            await touch_api_key(session, key_id, when)


class _NoAnswerError(Exception):
    """The database has not answered a lookup in time (the lookup goes on)."""


class _UnreachableError(Exception):
    """The database could not be reached for a lookup (the driver's error is the cause).

    Told apart inside the lookup's own task, where the driver's frames are certainly on
    the error's traceback: every caller waiting on that task gets this one instead."""


class CachedApiKeyStore:
    """Keeps what a lookup found (or that nothing was found) for ``ttl`` seconds, and
    writes ``last_used`` at most every ``touch_every`` seconds per key, so an inference
    call costs no SQL round trip.

    A revocation made through this gateway applies at once (:meth:`invalidate`); one
    made through another replica when this one notices it (:meth:`clear`, called by the
    config watcher about every second), at the latest within ``ttl`` seconds.

    While the database is unavailable (it fails, or has not answered within
    ``max_wait`` seconds), a key read from it in the last ``stale_for`` seconds keeps
    working as it was then: calls of tenants whose keys were in use go on, and a change
    to the key this gateway has not read yet (a revocation, say) applies when the
    database is back. Any other key is refused with :class:`DatabaseUnavailableError`
    (503: it may be valid), never taken for unknown. ``outage`` hears of each failed
    lookup and of the database's return.
    """

    def __init__(
        self,
        inner: ApiKeyStore,
        *,
        ttl: float = 5.0,
        stale_for: float = 600.0,
        max_wait: float = 2.0,
        touch_every: float = 60.0,
        max_entries: int = 100_000,
        outage: Outage | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inner = inner
        self._ttl = ttl
        self._stale_for = stale_for
        self._max_wait = max_wait
        self._touch_every = touch_every
        self._max_entries = max_entries
        self._outage = outage or Outage("database")
        self._clock = clock
        self._found: dict[str, tuple[float, StoredKey | None]] = {}
        # Each existing key as last read from the database, and when: what an outage
        # falls back on. Kept through clear(), which only says "read again when you can";
        # only keys that exist are kept, so callers cannot grow it with made-up ids.
        self._read: dict[str, tuple[float, StoredKey]] = {}
        self._touched: dict[str, float] = {}
        # The lookup under way per key (one serves every call that misses meanwhile),
        # and when it began (the event loop's time).
        self._loading: dict[str, tuple[float, asyncio.Task[StoredKey | None]]] = {}
        self._generation = 0  # moved by clear(): a lookup begun before is not kept

    async def get(self, key_id: str) -> StoredKey | None:
        now = self._clock()
        cached = self._found.get(key_id)
        if cached is not None and now - cached[0] < self._ttl:
            return cached[1]
        try:
            return await self._lookup(key_id, now)
        except _NoAnswerError as err:
            self._outage.failed(err)
        except _UnreachableError as err:
            self._outage.failed(err.__cause__)
        return self._last_read(key_id)

    async def touch(self, key_id: str, when: datetime) -> None:
        now = self._clock()
        last = self._touched.get(key_id)
        if last is not None and now - last < self._touch_every:
            return
        if len(self._touched) >= self._max_entries:
            self._touched.clear()
        self._touched[key_id] = now
        if self._outage.down:
            return  # only bookkeeping: no call waits on a database known to be out of reach
        try:
            await self._inner.touch(key_id, when)
        except DATABASE_ERRORS as err:
            if not database_unavailable(err):
                raise
            self._outage.failed(err)  # only bookkeeping: the call goes on

    def invalidate(self, key_id: str) -> None:
        self._found.pop(key_id, None)
        self._read.pop(key_id, None)  # revoked here: never served from an old read

    def clear(self) -> None:
        """Forget every lookup: the next use of each key reads the database again."""
        self._found.clear()
        self._generation += 1

    async def _lookup(self, key_id: str, now: float) -> StoredKey | None:
        """The key as the database says, waiting at most ``max_wait`` seconds from the
        start of the lookup. The lookup runs in a task of its own: a caller that stops
        waiting (it gave up, or it was cancelled) never cancels it, and what it reads is
        kept for the next call."""
        loop = asyncio.get_running_loop()
        loading = self._loading.get(key_id)
        if loading is None:
            task = loop.create_task(self._read_now(key_id, now, self._generation))
            loading = self._loading[key_id] = (loop.time(), task)
            task.add_done_callback(lambda done: self._loaded(key_id, done))
        began, task = loading
        await asyncio.wait({task}, timeout=max(0.0, began + self._max_wait - loop.time()))
        if not task.done():
            raise _NoAnswerError(f"no answer to a key lookup within {self._max_wait:g} s")
        return task.result()

    async def _read_now(self, key_id: str, now: float, generation: int) -> StoredKey | None:
        began = self._outage.now()
        try:
            stored = await self._inner.get(key_id)
        except DATABASE_ERRORS as err:
            if database_unavailable(err):
                raise _UnreachableError(str(err)) from err
            raise
        self._outage.recovered(began)
        if generation != self._generation:
            return stored  # it may have read the key before a revocation cleared the cache
        if len(self._found) >= self._max_entries:
            self._found.clear()  # a flood of unknown ids must not grow memory
        self._found[key_id] = (now, stored)
        if stored is None:
            self._read.pop(key_id, None)
        else:
            if len(self._read) >= self._max_entries:
                self._read.clear()
            self._read[key_id] = (now, stored)
        return stored

    def _loaded(self, key_id: str, task: asyncio.Task[StoredKey | None]) -> None:
        if self._loading.get(key_id, (0.0, None))[1] is task:
            del self._loading[key_id]
        if not task.cancelled():
            task.exception()  # retrieved: every caller may have stopped waiting

    def _last_read(self, key_id: str) -> StoredKey:
        """The key as last read, if that is recent enough to stand in for the database."""
        read = self._read.get(key_id)
        if read is None or self._clock() - read[0] > self._stale_for:
            raise DatabaseUnavailableError() from None
        return read[1]
