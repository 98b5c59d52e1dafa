"""The key cache in front of SQL: fresh for a while, one lookup for a burst of
misses, revocation through this replica at once, last-used written now and then."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from gateway.auth.keys import StoredKey
from gateway.auth.store import CachedApiKeyStore

KEY = StoredKey(
    key_id="k1",
    tenant="acme",
    principal="bot",
    secret_hash="x" * 64,
    roles=frozenset({"member"}),
    scopes=frozenset(),
    expires_at=None,
    revoked_at=None,
)
WHEN = datetime(2026, 11, 22, tzinfo=UTC)


class CountingStore:
    def __init__(self) -> None:
        self.gets = 0
        self.touches = 0
        self.fail = False
        self.release = asyncio.Event()
        self.release.set()

    async def get(self, key_id: str) -> StoredKey | None:
        self.gets += 1
        await self.release.wait()
        if self.fail:
            raise ConnectionError("database down")
        return KEY if key_id == "k1" else None

    async def touch(self, key_id: str, when: datetime) -> None:
        self.touches += 1


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_found_key_is_kept_for_the_ttl_then_looked_up_again() -> None:
    inner, clock = CountingStore(), Clock()
    store = CachedApiKeyStore(inner, ttl=5, clock=clock)
    assert await store.get("k1") == KEY
    clock.now = 4.9
    assert await store.get("k1") == KEY
    assert inner.gets == 1
    clock.now = 5.0
    await store.get("k1")
    assert inner.gets == 2


async def test_unknown_keys_are_cached_too_so_guessing_costs_no_sql() -> None:
    inner = CountingStore()
    store = CachedApiKeyStore(inner, clock=Clock())
    assert await store.get("nope") is None
    assert await store.get("nope") is None
    assert inner.gets == 1


async def test_a_burst_of_misses_shares_one_lookup() -> None:
    inner = CountingStore()
    inner.release.clear()
    store = CachedApiKeyStore(inner, clock=Clock())
    calls = [asyncio.create_task(store.get("k1")) for _ in range(20)]
    await asyncio.sleep(0)
    inner.release.set()
    assert await asyncio.gather(*calls) == [KEY] * 20
    assert inner.gets == 1


async def test_a_failed_lookup_fails_every_waiter_and_is_not_cached() -> None:
    inner = CountingStore()
    inner.release.clear()
    inner.fail = True
    store = CachedApiKeyStore(inner, clock=Clock())
    calls = [asyncio.create_task(store.get("k1")) for _ in range(3)]
    await asyncio.sleep(0)
    inner.release.set()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)
    inner.fail = False
    assert await store.get("k1") == KEY
    assert inner.gets == 2


async def test_invalidate_forgets_a_key_at_once() -> None:
    inner = CountingStore()
    store = CachedApiKeyStore(inner, clock=Clock())
    await store.get("k1")
    store.invalidate("k1")
    await store.get("k1")
    assert inner.gets == 2


@pytest.mark.parametrize(("gap", "touches"), [(10.0, 1), (60.0, 2)])
async def test_last_used_is_written_at_most_once_a_minute(gap: float, touches: int) -> None:
    inner, clock = CountingStore(), Clock()
    store = CachedApiKeyStore(inner, touch_every=60, clock=clock)
    await store.touch("k1", WHEN)
    clock.now = gap
    await store.touch("k1", WHEN)
    assert inner.touches == touches


async def test_clear_forgets_every_key_and_a_lookup_begun_before_it() -> None:
    """The config watcher clears the cache when keys change on any replica: a lookup
    that read the database before the change must not be kept afterwards."""
    inner = CountingStore()
    store = CachedApiKeyStore(inner, ttl=60, clock=Clock())
    await store.get("k1")
    store.clear()
    await store.get("k1")
    assert inner.gets == 2
    inner.release.clear()
    reading = asyncio.create_task(store.get("nope"))
    await asyncio.sleep(0)
    store.clear()  # while that lookup is under way
    inner.release.set()
    assert await reading is None
    await store.get("nope")
    assert inner.gets == 4  # the answer read before the clear was not kept
