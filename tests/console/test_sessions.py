"""The console's session stores: ids and CSRF tokens are random and renewed at sign-in,
sessions expire when idle and at the end of their lifetime, the stores are bounded, and
the database's holds no usable secret (only hashes of ids; a one-time token sealed with
the id, which only the browser has)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from gateway.auth.actor import SessionActor
from gateway.console.sessions import MemorySessionStore, SqlSessionStore, hash_id
from tenants import Database

ROOT = SessionActor(
    kind="bootstrap", principal="root", tenant="*", roles=frozenset({"admin"}), fingerprint="f"
)
OPS = SessionActor(
    kind="api-key",
    principal="ops",
    tenant="alpha",
    roles=frozenset({"member", "tenant-admin"}),
    key_id="abc123",
    fingerprint="0" * 32,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_sign_in_gives_a_new_id_and_csrf_token_and_drops_the_old() -> None:
    store = MemorySessionStore()
    anonymous = await store.new()
    signed = await store.sign_in(anonymous, ROOT)
    assert signed.id != anonymous.id and signed.csrf != anonymous.csrf
    assert await store.get(anonymous.id) is None and await store.get(signed.id) is signed
    assert signed.platform_admin and signed.tenant is None
    assert signed.id not in repr(signed) and signed.csrf not in repr(signed)


async def test_idle_and_lifetime_expiry() -> None:
    clock = Clock()
    store = MemorySessionStore(idle_seconds=60, lifetime_seconds=300, clock=clock)
    session = await store.new()
    clock.now += 59
    assert await store.get(session.id) is session  # seen again: its idle clock restarts
    clock.now += 59
    assert await store.get(session.id) is session
    clock.now += 61
    assert await store.get(session.id) is None
    busy = await store.new()
    for _ in range(5):
        clock.now += 50
        assert await store.get(busy.id) is busy
    clock.now += 51
    assert await store.get(busy.id) is None  # past 300 s after it began, however busy


async def test_csrf_tokens_must_match_exactly() -> None:
    session = await MemorySessionStore().new()
    assert session.csrf_matches(session.csrf)
    assert not session.csrf_matches(None)
    assert not session.csrf_matches("")
    assert not session.csrf_matches(session.csrf[:-1])
    assert not session.csrf_matches(session.csrf + "\udcff")  # not even UTF-8: no error


async def test_the_store_is_bounded_oldest_first() -> None:
    store = MemorySessionStore(max_sessions=3)
    first, *rest = [await store.new() for _ in range(3)]
    newest = await store.new()
    assert len(store) == 3
    assert await store.get(first.id) is None
    assert all([await store.get(s.id) is s for s in [*rest, newest]])


async def test_unknown_or_oversized_ids_find_nothing() -> None:
    store = MemorySessionStore()
    await store.new()
    assert await store.get(None) is None and await store.get("") is None
    assert await store.get("x" * 1000) is None


async def test_a_flood_of_sign_in_pages_signs_no_one_out() -> None:
    store = MemorySessionStore(max_sessions=3)
    admin = await store.sign_in(await store.new(), ROOT)
    for _ in range(100):
        await store.new()
    assert len(store) == 3 and await store.get(admin.id) is admin


async def _rows(database: Database) -> list[dict[str, Any]]:
    async with database.session() as db:
        result = await db.connection()
        rows = (await result.execute(text("SELECT * FROM console_sessions"))).mappings().all()
    return [dict(row) for row in rows]


async def test_the_database_holds_hashes_and_sealed_secrets_only(database: Database) -> None:
    store = SqlSessionStore(database)
    signed = await store.sign_in(await store.new(), OPS)
    token = "ign_live_abc123_" + "S" * 43
    await store.set_flash(signed, f"your token: {token}")
    rows = await _rows(database)
    assert [r["id_hash"] for r in rows] == [hash_id(signed.id)]
    dumped = repr(rows)
    assert signed.id not in dumped and token not in dumped and "S" * 20 not in dumped
    assert rows[0]["key_id"] == "abc123" and rows[0]["kind"] == "api-key"
    # Only the holder of the id reads the one-time message, and only once.
    found = await store.get(signed.id, take_flash=True)
    assert found is not None and found.flash == f"your token: {token}"
    again = await store.get(signed.id, take_flash=True)
    assert again is not None and again.flash is None
    assert again.actor == OPS and again.tenant == "alpha" and not again.platform_admin


async def test_a_session_from_one_store_works_in_another_and_ends_in_both(
    database: Database,
) -> None:
    """Two replicas: two stores on one database."""
    one, other = SqlSessionStore(database), SqlSessionStore(database)
    signed = await one.sign_in(await one.new(), ROOT)
    seen = await other.get(signed.id)
    assert seen is not None and seen.platform_admin and seen.csrf == signed.csrf
    await other.drop(signed.id)
    assert await one.get(signed.id) is None


async def test_database_sessions_expire_when_idle_and_at_their_end(database: Database) -> None:
    clock = Clock()
    store = SqlSessionStore(
        database, idle_seconds=60, lifetime_seconds=300, touch_seconds=0, clock=clock
    )
    idle = await store.sign_in(None, ROOT)
    clock.now += 61
    assert await store.get(idle.id) is None
    busy = await store.sign_in(None, ROOT)
    for _ in range(5):
        clock.now += 50
        assert await store.get(busy.id) is not None
    clock.now += 51
    assert await store.get(busy.id) is None
    assert await _rows(database) == []  # an expired session found is gone


async def test_a_pending_oidc_sign_in_is_taken_once(database: Database) -> None:
    store = SqlSessionStore(database)
    pending_id = await store.begin_pending({"state": "s", "nonce": "n", "verifier": "v"})
    assert "v" not in [r["sealed"] for r in await _rows(database)]
    assert await store.get(pending_id) is None  # not a session
    assert await store.take_pending(pending_id) == {"state": "s", "nonce": "n", "verifier": "v"}
    assert await store.take_pending(pending_id) is None
    assert await store.take_pending("made-up") is None and await store.take_pending(None) is None


async def test_a_flood_of_signed_out_rows_signs_no_one_out(database: Database) -> None:
    store = SqlSessionStore(database, max_signed_out=3)
    admin = await store.sign_in(await store.new(), ROOT)
    for _ in range(20):
        await store.new()
    for _ in range(5):
        await store.begin_pending({"state": "s"})
    rows = await _rows(database)
    assert len(rows) == 4 and await store.get(admin.id) is not None
