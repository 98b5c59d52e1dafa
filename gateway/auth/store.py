"""The authenticator's key store over SQL (tenants' API key rows)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import datetime

from gateway.auth.identity import ANY_TENANT
from gateway.auth.keys import ApiKeyStore, StoredKey
from tenants import Database
from tenants.services.api_keys import find_api_key, touch_api_key

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
        )

    async def touch(self, key_id: str, when: datetime) -> None:
        async with self.database.session() as session:
            await touch_api_key(session, key_id, when)


class CachedApiKeyStore:
    """Keeps what a lookup found (or that nothing was found) for ``ttl`` seconds, and
    writes ``last_used`` at most every ``touch_every`` seconds per key, so an inference
    call costs no SQL round trip.

    A revocation made through this gateway applies at once (:meth:`invalidate`); one
    made through another replica when this one notices it (:meth:`clear`, called by the
    config watcher about every second), at the latest within ``ttl`` seconds.
    """

    def __init__(
        self,
        inner: ApiKeyStore,
        *,
        ttl: float = 5.0,
        touch_every: float = 60.0,
        max_entries: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inner = inner
        self._ttl = ttl
        self._touch_every = touch_every
        self._max_entries = max_entries
        self._clock = clock
        self._found: dict[str, tuple[float, StoredKey | None]] = {}
        self._touched: dict[str, float] = {}
        self._loading: dict[str, asyncio.Future[StoredKey | None]] = {}
        self._generation = 0  # moved by clear(): a lookup begun before is not kept

    async def get(self, key_id: str) -> StoredKey | None:
        now = self._clock()
        cached = self._found.get(key_id)
        if cached is not None and now - cached[0] < self._ttl:
            return cached[1]
        loading = self._loading.get(key_id)
        if loading is not None:  # one lookup serves every call that missed meanwhile
            return await asyncio.shield(loading)
        future: asyncio.Future[StoredKey | None] = asyncio.get_running_loop().create_future()
        self._loading[key_id] = future
        generation = self._generation
        try:
            stored = await self._inner.get(key_id)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as err:  # the waiters get the same error, then it is raised here
            future.set_exception(err)
            future.exception()  # marked retrieved: nobody may be waiting
            raise
        finally:
            del self._loading[key_id]
        future.set_result(stored)
        if generation != self._generation:
            return stored  # it may have read the key before a revocation cleared the cache
        if len(self._found) >= self._max_entries:
            self._found.clear()  # a flood of unknown ids must not grow memory
        self._found[key_id] = (now, stored)
        return stored

    async def touch(self, key_id: str, when: datetime) -> None:
        now = self._clock()
        last = self._touched.get(key_id)
        if last is not None and now - last < self._touch_every:
            return
        if len(self._touched) >= self._max_entries:
            self._touched.clear()
        self._touched[key_id] = now
        await self._inner.touch(key_id, when)

    def invalidate(self, key_id: str) -> None:
        self._found.pop(key_id, None)

    def clear(self) -> None:
        """Forget every lookup: the next use of each key reads the database again."""
        self._found.clear()
        self._generation += 1
