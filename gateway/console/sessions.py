"""The console's server-side sessions: a random id in a cookie, everything else here.

A session holds the token the admin signed in with, so every call the console makes on
its behalf goes through the API's own authentication with exactly that key's powers
(a key revoked or expired meanwhile ends the session at its next call), and a CSRF token
that every change must echo. Sessions live in this process's memory: a restart, or
another replica, signs everyone out.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["IDLE_SECONDS", "LIFETIME_SECONDS", "MAX_SESSIONS", "Session", "SessionStore"]

IDLE_SECONDS = 30 * 60
"""A session unused this long is gone."""
LIFETIME_SECONDS = 8 * 3600
"""However busy, a session ends this long after sign-in."""
MAX_SESSIONS = 10_000
"""Sign-in pages are open to anyone: past this many sessions the oldest go first."""


@dataclass(slots=True, kw_only=True)
class Session:
    """One browser's session. ``token`` is ``None`` until it signs in (the sign-in form
    itself needs a CSRF token, hence a session before sign-in)."""

    id: str
    csrf: str
    created: float
    seen: float
    token: str | None = field(default=None, repr=False)
    tenant: str | None = None  # None: a platform admin
    principal: str = ""
    roles: frozenset[str] = frozenset()
    flash: str | None = None  # a one-time message for the next page (a new key's token)

    @property
    def signed_in(self) -> bool:
        return self.token is not None

    @property
    def platform_admin(self) -> bool:
        return self.signed_in and self.tenant is None

    def csrf_matches(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(
            candidate.encode("utf-8", "surrogatepass"), self.csrf.encode()
        )

    def take_flash(self) -> str | None:
        flash, self.flash = self.flash, None
        return flash


class SessionStore:
    """Sessions by id, in memory, with idle and absolute expiry."""

    def __init__(
        self,
        *,
        idle_seconds: float = IDLE_SECONDS,
        lifetime_seconds: float = LIFETIME_SECONDS,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sessions: dict[str, Session] = {}
        self._idle = idle_seconds
        self._lifetime = lifetime_seconds
        self._max = max_sessions
        self._clock = clock

    def __len__(self) -> int:
        return len(self._sessions)

    def new(self) -> Session:
        """A fresh, signed-out session with a new id and CSRF token."""
        self._sweep()
        now = self._clock()
        session = Session(
            id=secrets.token_urlsafe(32), csrf=secrets.token_urlsafe(32), created=now, seen=now
        )
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of that id (its idle clock restarted), or ``None``."""
        if not session_id or len(session_id) > 128:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = self._clock()
        if self._expired(session, now):
            del self._sessions[session_id]
            return None
        session.seen = now
        return session

    def sign_in(
        self,
        old: Session,
        *,
        token: str,
        tenant: str | None,
        principal: str,
        roles: frozenset[str],
    ) -> Session:
        """A new session (new id and CSRF token: no fixation) for the signed-in key;
        the signed-out one it replaces is dropped."""
        self.drop(old.id)
        session = self.new()
        session.token = token
        session.tenant = tenant
        session.principal = principal
        session.roles = roles
        return session

    def drop(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

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
