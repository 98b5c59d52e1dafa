"""The console's server-side sessions: a random id in a cookie, everything else here.

A session keeps no key: it keeps a :class:`~gateway.auth.actor.SessionActor`, the
reference the API's authenticator checks again on every call the console makes on its
behalf, so a page does exactly what that key may do, and a key revoked, expired or
rotated past its grace ends the session at its next call. Every change must echo the
session's CSRF token.

Two stores, one interface (:class:`SessionStore`):

* :class:`SqlSessionStore`, what the gateway runs: rows in ``console_sessions`` (SQLite
  or PostgreSQL), so a session made on one replica works on every other and a sign-out
  on one ends it everywhere. The rows hold the SHA-256 of each id, never the id; what
  must stay secret (a new key's token shown once, a pending OIDC sign-in's verifier) is
  sealed with a key derived from the id, which only the browser holds.
* :class:`MemorySessionStore`: one process's memory, for a console built without a
  database (tests, embedding).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import delete, func, select, update
from sqlmodel import col
from sqlmodel import select as sqlmodel_select

from gateway.auth import ANY_TENANT
from gateway.auth.actor import SessionActor
from tenants import Database
from tenants.models.console_session import ConsoleSessionRow

__all__ = [
    "IDLE_SECONDS",
    "LIFETIME_SECONDS",
    "MAX_SESSIONS",
    "PENDING_SECONDS",
    "MemorySessionStore",
    "Session",
    "SessionStore",
    "SqlSessionStore",
    "hash_id",
    "seal",
    "unseal",
]

IDLE_SECONDS = 30 * 60
"""A session unused this long is gone."""
LIFETIME_SECONDS = 8 * 3600
"""However busy, a session ends this long after sign-in."""
MAX_SESSIONS = 10_000
"""Sign-in pages are open to anyone: past this many signed-out sessions (and pending
OIDC sign-ins) the oldest go first."""
PENDING_SECONDS = 10 * 60
"""How long an OIDC sign-in may take at the provider."""
MAX_ID_CHARS = 128
_PENDING = "oidc-pending"
_SIGNED_OUT = ("", _PENDING)


def hash_id(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()


def _seal_key(session_id: str) -> bytes:
    return hashlib.sha256(b"ignara-console-seal\0" + session_id.encode()).digest()


def seal(session_id: str, value: str) -> str:
    """``value`` encrypted so that only a holder of ``session_id`` can read it."""
    nonce = secrets.token_bytes(12)
    sealed = AESGCM(_seal_key(session_id)).encrypt(nonce, value.encode(), None)
    return base64.urlsafe_b64encode(nonce + sealed).decode()


def unseal(session_id: str, sealed: str) -> str | None:
    try:
        raw = base64.urlsafe_b64decode(sealed.encode())
        return AESGCM(_seal_key(session_id)).decrypt(raw[:12], raw[12:], None).decode()
    except (InvalidTag, ValueError):
        return None


@dataclass(slots=True, kw_only=True)
class Session:
    """One browser's session. ``actor`` is ``None`` until it signs in (the sign-in form
    itself needs a CSRF token, hence a session before sign-in)."""

    id: str = field(repr=False)
    csrf: str = field(repr=False)
    created: float
    seen: float
    actor: SessionActor | None = None
    flash: str | None = field(default=None, repr=False)  # for the next page (a new token)

    @property
    def signed_in(self) -> bool:
        return self.actor is not None

    @property
    def platform_admin(self) -> bool:
        return (
            self.actor is not None
            and self.actor.tenant == ANY_TENANT
            and "admin" in self.actor.roles
        )

    @property
    def tenant(self) -> str | None:
        """The tenant a tenant admin administers; ``None`` for a platform admin."""
        if self.actor is None or self.platform_admin:
            return None
        return self.actor.tenant

    @property
    def principal(self) -> str:
        return self.actor.principal if self.actor is not None else ""

    @property
    def roles(self) -> frozenset[str]:
        return self.actor.roles if self.actor is not None else frozenset()

    def csrf_matches(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(
            candidate.encode("utf-8", "surrogatepass"), self.csrf.encode()
        )

    def take_flash(self) -> str | None:
        flash, self.flash = self.flash, None
        return flash


class SessionStore(Protocol):
    """Where console sessions live. ``get(..., take_flash=True)`` hands the session's
    one-time message over (and forgets it): only a page that shows it asks so."""

    async def new(self) -> Session: ...

    async def get(self, session_id: str | None, *, take_flash: bool = False) -> Session | None: ...

    async def sign_in(self, old: Session | None, actor: SessionActor) -> Session: ...

    async def set_flash(self, session: Session, flash: str | None) -> None: ...

    async def drop(self, session_id: str) -> None: ...

    async def begin_pending(self, payload: dict[str, str]) -> str:
        """A pending OIDC sign-in (state, nonce, PKCE verifier): its id, for a cookie."""
        ...

    async def take_pending(self, pending_id: str | None) -> dict[str, str] | None:
        """The pending sign-in of that id, once: a second call finds nothing."""
        ...


def _valid_id(session_id: str | None) -> bool:
    return bool(session_id) and len(session_id or "") <= MAX_ID_CHARS


class MemorySessionStore:
    """Sessions by id in this process's memory, with idle and absolute expiry."""

    def __init__(
        self,
        *,
        idle_seconds: float = IDLE_SECONDS,
        lifetime_seconds: float = LIFETIME_SECONDS,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sessions: dict[str, Session] = {}
        self._pending: dict[str, tuple[float, dict[str, str]]] = {}
        self._idle = idle_seconds
        self._lifetime = lifetime_seconds
        self._max = max_sessions
        self._clock = clock

    def __len__(self) -> int:
        return len(self._sessions)

    async def new(self) -> Session:
        self._sweep()
        now = self._clock()
        session = Session(
            id=secrets.token_urlsafe(32), csrf=secrets.token_urlsafe(32), created=now, seen=now
        )
        self._sessions[session.id] = session
        return session

    async def get(self, session_id: str | None, *, take_flash: bool = False) -> Session | None:
        if not _valid_id(session_id):
            return None
        assert session_id is not None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = self._clock()
        if self._expired(session, now):
            del self._sessions[session_id]
            return None
        session.seen = now
        return session

    async def sign_in(self, old: Session | None, actor: SessionActor) -> Session:
        """A new session (new id and CSRF token: no fixation); the old one is dropped."""
        if old is not None:
            await self.drop(old.id)
        session = await self.new()
        session.actor = actor
        return session

    async def set_flash(self, session: Session, flash: str | None) -> None:
        session.flash = flash

    async def drop(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    async def begin_pending(self, payload: dict[str, str]) -> str:
        now = self._clock()
        for pid in [p for p, (at, _) in self._pending.items() if now - at > PENDING_SECONDS]:
            del self._pending[pid]
        while len(self._pending) >= self._max:
            del self._pending[next(iter(self._pending))]
        pending_id = secrets.token_urlsafe(32)
        self._pending[pending_id] = (now, dict(payload))
        return pending_id

    async def take_pending(self, pending_id: str | None) -> dict[str, str] | None:
        if not _valid_id(pending_id):
            return None
        assert pending_id is not None
        found = self._pending.pop(pending_id, None)
        if found is None or self._clock() - found[0] > PENDING_SECONDS:
            return None
        return found[1]

    def _expired(self, session: Session, now: float) -> bool:
        return now - session.seen > self._idle or now - session.created > self._lifetime

    def _sweep(self) -> None:
        now = self._clock()
        for sid in [s.id for s in self._sessions.values() if self._expired(s, now)]:
            del self._sessions[sid]
        if len(self._sessions) < self._max:
            return
        # Anyone can open the sign-in page: signed-out sessions go first, oldest first
        # (dicts keep insertion order), so a flood of them never signs an admin out.
        signed_out = [s.id for s in self._sessions.values() if not s.signed_in]
        for sid in signed_out[: len(self._sessions) - self._max + 1]:
            del self._sessions[sid]
        while len(self._sessions) >= self._max:
            del self._sessions[next(iter(self._sessions))]


def _epoch(moment: datetime) -> float:
    return moment.timestamp()


def _moment(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


class SqlSessionStore:
    """Sessions as rows of ``console_sessions``, shared by every replica on the database.

    ``seen`` is written at most every ``touch_seconds`` per session (a page view is not
    worth a write each), so the idle timeout holds within that much. Expired rows go in
    a sweep at most every ``sweep_seconds``, run by whichever replica makes a session.
    """

    def __init__(
        self,
        database: Database,
        *,
        idle_seconds: float = IDLE_SECONDS,
        lifetime_seconds: float = LIFETIME_SECONDS,
        max_signed_out: int = MAX_SESSIONS,
        touch_seconds: float | None = None,
        sweep_seconds: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = database
        self._idle = idle_seconds
        self._lifetime = lifetime_seconds
        self._max = max_signed_out
        self._touch = min(60.0, idle_seconds / 10) if touch_seconds is None else touch_seconds
        self._sweep_every = sweep_seconds
        self._swept_at = -float("inf")
        self._clock = clock

    async def new(self) -> Session:
        return await self._insert(None)

    async def get(self, session_id: str | None, *, take_flash: bool = False) -> Session | None:
        if not _valid_id(session_id):
            return None
        assert session_id is not None
        id_hash = hash_id(session_id)
        now = self._clock()
        async with self._db.session() as db:
            row = await db.get(ConsoleSessionRow, id_hash)
            if row is None or row.kind == _PENDING:
                return None
            if self._expired(row, now):
                await db.exec(
                    delete(ConsoleSessionRow).where(col(ConsoleSessionRow.id_hash) == id_hash)
                )
                return None
            values: dict[str, Any] = {}
            if now - _epoch(row.seen_at) >= self._touch:
                values["seen_at"] = _moment(now)
            flash = None
            sealed, csrf, created, actor = row.sealed, row.csrf, row.created_at, _actor_of(row)
            if take_flash and sealed is not None:
                # Whoever clears it shows it: two pages loading at once show it once.
                taken = await db.exec(
                    update(ConsoleSessionRow)
                    .where(col(ConsoleSessionRow.id_hash) == id_hash)
                    .where(col(ConsoleSessionRow.sealed) == sealed)
                    .values(sealed=None, **values)
                )
                values = {}
                if getattr(taken, "rowcount", 0) == 1:
                    flash = unseal(session_id, sealed)
            if values:
                await db.exec(
                    update(ConsoleSessionRow)
                    .where(col(ConsoleSessionRow.id_hash) == id_hash)
                    .values(**values)
                )
            return Session(
                id=session_id,
                csrf=csrf,
                created=_epoch(created),
                seen=now,
                actor=actor,
                flash=flash,
            )

    async def sign_in(self, old: Session | None, actor: SessionActor) -> Session:
        """A new session (new id and CSRF token: no fixation); the old one is dropped."""
        if old is not None:
            await self.drop(old.id)
        return await self._insert(actor)

    async def set_flash(self, session: Session, flash: str | None) -> None:
        session.flash = None
        sealed = seal(session.id, flash) if flash is not None else None
        async with self._db.session() as db:
            await db.exec(
                update(ConsoleSessionRow)
                .where(col(ConsoleSessionRow.id_hash) == hash_id(session.id))
                .values(sealed=sealed)
            )

    async def drop(self, session_id: str) -> None:
        async with self._db.session() as db:
            await db.exec(
                delete(ConsoleSessionRow).where(
                    col(ConsoleSessionRow.id_hash) == hash_id(session_id)
                )
            )

    async def drop_key(self, key_id: str) -> int:
        """End every session signed in with that key (on any replica); how many."""
        async with self._db.session() as db:
            result = await db.exec(
                delete(ConsoleSessionRow).where(col(ConsoleSessionRow.key_id) == key_id)
            )
        return int(getattr(result, "rowcount", 0) or 0)

    async def begin_pending(self, payload: dict[str, str]) -> str:
        await self._make_room()
        pending_id = secrets.token_urlsafe(32)
        now = self._clock()
        async with self._db.session() as db:
            db.add(
                ConsoleSessionRow(
                    id_hash=hash_id(pending_id),
                    csrf="-",
                    kind=_PENDING,
                    sealed=seal(pending_id, json.dumps(payload)),
                    created_at=_moment(now),
                    seen_at=_moment(now),
                    expires_at=_moment(now + PENDING_SECONDS),
                )
            )
        return pending_id

    async def take_pending(self, pending_id: str | None) -> dict[str, str] | None:
        if not _valid_id(pending_id):
            return None
        assert pending_id is not None
        id_hash = hash_id(pending_id)
        async with self._db.session() as db:
            row = await db.get(ConsoleSessionRow, id_hash)
            if row is None or row.kind != _PENDING or row.sealed is None:
                return None
            sealed, expires = row.sealed, _epoch(row.expires_at)
            # The row's deletion decides which of two racing callbacks owns it.
            gone = await db.exec(
                delete(ConsoleSessionRow)
                .where(col(ConsoleSessionRow.id_hash) == id_hash)
                .where(col(ConsoleSessionRow.kind) == _PENDING)
            )
            if getattr(gone, "rowcount", 0) != 1 or expires < self._clock():
                return None
            text = unseal(pending_id, sealed)
        payload = json.loads(text) if text else None
        if not isinstance(payload, dict) or not all(isinstance(v, str) for v in payload.values()):
            return None
        return payload

    async def _insert(self, actor: SessionActor | None) -> Session:
        if actor is None:
            await self._make_room()
        elif self._clock() - self._swept_at >= self._sweep_every:
            await self._sweep()
        now = self._clock()
        session = Session(
            id=secrets.token_urlsafe(32),
            csrf=secrets.token_urlsafe(32),
            created=now,
            seen=now,
            actor=actor,
        )
        row = ConsoleSessionRow(
            id_hash=hash_id(session.id),
            csrf=session.csrf,
            created_at=_moment(now),
            seen_at=_moment(now),
            expires_at=_moment(now + self._lifetime),
        )
        if actor is not None:
            row.kind = actor.kind
            row.key_id = actor.key_id
            row.fingerprint = actor.fingerprint
            row.tenant = actor.tenant
            row.principal = actor.principal
            row.roles = sorted(actor.roles)
            row.scopes = sorted(actor.scopes)
        async with self._db.session() as db:
            db.add(row)
        return session

    def _expired(self, row: ConsoleSessionRow, now: float) -> bool:
        return now - _epoch(row.seen_at) > self._idle or now >= _epoch(row.expires_at)

    async def _sweep(self) -> None:
        now = self._clock()
        self._swept_at = now
        async with self._db.session() as db:
            await db.exec(
                delete(ConsoleSessionRow).where(
                    (col(ConsoleSessionRow.expires_at) <= _moment(now))
                    | (col(ConsoleSessionRow.seen_at) < _moment(now - self._idle))
                )
            )

    async def _make_room(self) -> None:
        """Past ``max_signed_out`` signed-out sessions and pending sign-ins, the oldest
        go: a flood of sign-in pages never signs an admin out, nor grows the table."""
        if self._clock() - self._swept_at >= self._sweep_every:
            await self._sweep()
        signed_out = col(ConsoleSessionRow.kind).in_(_SIGNED_OUT)
        async with self._db.session() as db:
            count = (
                await db.exec(
                    sqlmodel_select(func.count()).select_from(ConsoleSessionRow).where(signed_out)
                )
            ).one()
            if count < self._max:
                return
            oldest = (
                select(col(ConsoleSessionRow.id_hash))
                .where(signed_out)
                .order_by(col(ConsoleSessionRow.seen_at))
                .limit(count - self._max + 1)
            )
            await db.exec(
                delete(ConsoleSessionRow).where(col(ConsoleSessionRow.id_hash).in_(oldest))
            )


def _actor_of(row: ConsoleSessionRow) -> SessionActor | None:
    if row.kind not in ("api-key", "bootstrap", "oidc"):
        return None
    return SessionActor(
        kind=row.kind,  # type: ignore[arg-type]  # checked just above
        principal=row.principal,
        tenant=row.tenant or "",
        roles=frozenset(row.roles),
        scopes=frozenset(row.scopes),
        key_id=row.key_id,
        fingerprint=row.fingerprint,
    )
