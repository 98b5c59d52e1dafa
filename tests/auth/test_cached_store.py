"""The key cache in front of SQL: fresh for a while, one lookup for a burst of
misses, revocation through this replica at once, last-used written now and then; and
while the database is unavailable, keys read recently work as read, others are a 503."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from sqlalchemy.exc import IntegrityError

from gateway.auth import (
    Authenticator,
    InMemoryApiKeyStore,
    InvalidApiKeyError,
    RevokedApiKeyError,
    generate_api_key,
    hash_secret,
)
from gateway.auth.errors import DatabaseUnavailableError
from gateway.auth.keys import StoredKey
from gateway.auth.store import CachedApiKeyStore, SqlApiKeyStore
from gateway.outages import Outage
from tenants import Database
from tests.support.gateways import free_port

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


# -- while the database is unavailable ----------------------------------------------------


class FlakyDatabase:
    """Keys from memory while up; while down, what a real lookup gets from a PostgreSQL
    nobody listens for (asyncpg's connection refused, through SQLAlchemy)."""

    def __init__(self, *keys: StoredKey) -> None:
        self.keys = InMemoryApiKeyStore(keys)
        self.down = False
        self.gets = 0
        self.gone = Database(f"postgresql://postgres@127.0.0.1:{free_port()}/ignara")
        self._gone = SqlApiKeyStore(self.gone)

    async def get(self, key_id: str) -> StoredKey | None:
        self.gets += 1
        return await (self._gone if self.down else self.keys).get(key_id)

    async def touch(self, key_id: str, when: datetime) -> None:
        await (self._gone if self.down else self.keys).touch(key_id, when)


@pytest.fixture
async def flaky() -> AsyncIterator[FlakyDatabase]:
    database = FlakyDatabase(KEY)
    yield database
    await database.gone.dispose()


async def test_while_the_database_is_down_a_key_read_recently_works_as_it_was_read(
    flaky: FlakyDatabase,
) -> None:
    clock = Clock()
    store = CachedApiKeyStore(flaky, ttl=5, stale_for=600, clock=clock)
    assert await store.get("k1") == KEY
    flaky.down = True
    clock.now = 10.0  # past the ttl: the database is asked, and fails
    assert await store.get("k1") == KEY
    clock.now = 600.0
    assert await store.get("k1") == KEY
    assert flaky.gets == 3  # each was a real attempt, not a cache hit
    clock.now = 600.5  # too old to stand in for the database
    with pytest.raises(DatabaseUnavailableError):
        await store.get("k1")
    flaky.down = False
    assert await store.get("k1") == KEY


async def test_while_the_database_is_down_a_key_never_read_is_unavailable_not_unknown(
    flaky: FlakyDatabase,
) -> None:
    clock = Clock()
    store = CachedApiKeyStore(flaky, ttl=5, clock=clock)
    assert await store.get("absent") is None  # read as absent before the outage
    flaky.down = True
    clock.now = 10.0
    for key_id in ("absent", "never-seen"):
        with pytest.raises(DatabaseUnavailableError) as caught:
            await store.get(key_id)
        assert (caught.value.status_code, caught.value.code) == (503, "database_unavailable")
        assert caught.value.retry_after is not None


async def test_a_key_revoked_through_this_gateway_is_never_served_from_an_old_read(
    flaky: FlakyDatabase,
) -> None:
    clock = Clock()
    store = CachedApiKeyStore(flaky, clock=clock)
    await store.get("k1")
    store.invalidate("k1")
    flaky.down = True
    with pytest.raises(DatabaseUnavailableError):
        await store.get("k1")


async def test_clear_asks_the_database_again_but_keeps_the_last_read_for_an_outage(
    flaky: FlakyDatabase,
) -> None:
    """The watcher clears the cache whenever any key changes anywhere: that must not
    leave every tenant without service if the database goes down just after."""
    store = CachedApiKeyStore(flaky, ttl=60, clock=Clock())
    await store.get("k1")
    store.clear()
    flaky.down = True
    assert await store.get("k1") == KEY
    assert flaky.gets == 2


async def test_no_stale_key_is_served_when_the_bound_is_zero(flaky: FlakyDatabase) -> None:
    clock = Clock()
    store = CachedApiKeyStore(flaky, ttl=5, stale_for=0, clock=clock)
    await store.get("k1")
    flaky.down = True
    clock.now = 5.0
    with pytest.raises(DatabaseUnavailableError):
        await store.get("k1")


async def test_errors_other_than_an_unavailable_database_are_not_hidden() -> None:
    """A bug (here an integrity error, or an OSError of no database driver) is raised
    as it is, not answered from an old read."""

    class Broken:
        error: Exception = IntegrityError("INSERT", None, Exception("duplicate"))

        async def get(self, key_id: str) -> StoredKey | None:
            raise self.error

        async def touch(self, key_id: str, when: datetime) -> None:
            raise self.error

    store = CachedApiKeyStore(Broken(), clock=Clock())
    with pytest.raises(IntegrityError):
        await store.get("k1")
    Broken.error = FileNotFoundError("/nowhere")
    with pytest.raises(FileNotFoundError):
        await store.get("k1")
    with pytest.raises(FileNotFoundError):
        await store.touch("k1", WHEN)


async def test_an_outage_is_told_once_then_its_end(
    flaky: FlakyDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    clock = Clock()
    outage = Outage("database", clock=clock)
    store = CachedApiKeyStore(flaky, ttl=5, outage=outage, clock=clock)
    await store.get("k1")
    flaky.down = True
    clock.now = 10.0
    for _ in range(50):
        await store.get("k1")
        with pytest.raises(DatabaseUnavailableError):
            await store.get("other")
    await store.touch("k1", WHEN)  # last_used is not even tried while it is down
    assert outage.down and outage.failures == 100
    flaky.down = False
    assert await store.get("other") is None
    assert not outage.down
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert messages[0].startswith("database down: ConnectionRefusedError: ")
    assert messages[1] == "database back after 0.0 s: 100 calls failed meanwhile"


async def test_through_the_authenticator_an_outage_lets_known_keys_in_and_refuses_others(
    flaky: FlakyDatabase,
) -> None:
    pepper = b"pepper-for-tests-0123456789"
    good, revoked = generate_api_key("live"), generate_api_key("live")
    for made, revoked_at in ((good, None), (revoked, WHEN)):
        flaky.keys.add(
            StoredKey(
                made.key_id, "acme", "bot", hash_secret(made.secret, pepper), revoked_at=revoked_at
            )
        )
    clock = Clock()
    authenticator = Authenticator(
        api_keys=CachedApiKeyStore(flaky, ttl=5, clock=clock), pepper=pepper
    )
    assert (await authenticator.authenticate_token(good.token)).tenant == "acme"
    with pytest.raises(RevokedApiKeyError):
        await authenticator.authenticate_token(revoked.token)
    flaky.down = True
    clock.now = 61.0  # past the ttl; last_used is due, but not tried while it is down
    assert (await authenticator.authenticate_token(good.token)).tenant == "acme"
    with pytest.raises(RevokedApiKeyError):  # revoked as read: still revoked
        await authenticator.authenticate_token(revoked.token)
    wrong_secret = good.token[:-4] + ("AAAA" if not good.token.endswith("AAAA") else "BBBB")
    with pytest.raises(InvalidApiKeyError):  # an old read still checks the secret
        await authenticator.authenticate_token(wrong_secret)
    with pytest.raises(DatabaseUnavailableError):
        await authenticator.authenticate_token(generate_api_key("live").token)


async def test_a_database_that_does_not_answer_is_waited_for_a_bounded_time() -> None:
    """A frozen or unreachable database (no refusal, no answer): callers stop waiting
    after ``max_wait`` and are answered from the last read, or refused; the lookup
    itself goes on, and what it finally reads is kept."""
    inner, clock = CountingStore(), Clock()
    store = CachedApiKeyStore(inner, ttl=5, max_wait=0.05, clock=clock)
    await store.get("k1")
    inner.release.clear()  # from now on the database holds every lookup
    clock.now = 10.0
    assert await store.get("k1") == KEY  # the last read, after 0.05 s
    assert await store.get("k1") == KEY  # joins the lookup under way, past its wait
    with pytest.raises(DatabaseUnavailableError):
        await store.get("nope")
    assert inner.gets == 3  # one lookup per key, however many calls
    await asyncio.wait_for(store.touch("k1", WHEN), 1)  # last_used is not waited for
    assert inner.touches == 0
    inner.release.set()
    await asyncio.sleep(0.01)
    assert await store.get("nope") is None  # read meanwhile, and kept
    assert inner.gets == 3
