"""The console's session store: ids and CSRF tokens are random and renewed at sign-in,
sessions expire when idle and at the end of their lifetime, and the store is bounded."""

from __future__ import annotations

from gateway.console.sessions import SessionStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_sign_in_gives_a_new_id_and_csrf_token_and_drops_the_old() -> None:
    store = SessionStore()
    anonymous = store.new()
    signed = store.sign_in(
        anonymous, token="t" * 20, tenant=None, principal="root", roles=frozenset({"admin"})
    )
    assert signed.id != anonymous.id and signed.csrf != anonymous.csrf
    assert store.get(anonymous.id) is None and store.get(signed.id) is signed
    assert signed.platform_admin and "t" * 20 not in repr(signed)


def test_idle_and_lifetime_expiry() -> None:
    clock = Clock()
    store = SessionStore(idle_seconds=60, lifetime_seconds=300, clock=clock)
    session = store.new()
    clock.now += 59
    assert store.get(session.id) is session  # seen again: its idle clock restarts
    clock.now += 59
    assert store.get(session.id) is session
    clock.now += 61
    assert store.get(session.id) is None
    busy = store.new()
    for _ in range(5):
        clock.now += 50
        assert store.get(busy.id) is busy
    clock.now += 51
    assert store.get(busy.id) is None  # past 300 s after it began, however busy


def test_csrf_tokens_must_match_exactly() -> None:
    session = SessionStore().new()
    assert session.csrf_matches(session.csrf)
    assert not session.csrf_matches(None)
    assert not session.csrf_matches("")
    assert not session.csrf_matches(session.csrf[:-1])
    assert not session.csrf_matches(session.csrf + "\udcff")  # not even UTF-8: no error


def test_the_store_is_bounded_oldest_first() -> None:
    store = SessionStore(max_sessions=3)
    first, *rest = [store.new() for _ in range(3)]
    newest = store.new()
    assert len(store) == 3
    assert store.get(first.id) is None
    assert all(store.get(s.id) is s for s in [*rest, newest])


def test_unknown_or_oversized_ids_find_nothing() -> None:
    store = SessionStore()
    store.new()
    assert store.get(None) is None and store.get("") is None and store.get("x" * 1000) is None


def test_a_flood_of_sign_in_pages_signs_no_one_out() -> None:
    store = SessionStore(max_sessions=3)
    admin = store.sign_in(
        store.new(), token="t" * 20, tenant=None, principal="root", roles=frozenset({"admin"})
    )
    for _ in range(100):
        store.new()
    assert len(store) == 3 and store.get(admin.id) is admin
