"""Ignara API keys: format, generation and keyed hashing. Pure functions, plus the
small storage interface the authenticator needs (SQL lives in ``tenants/``).

A key reads ``ign_<env>_<keyid>_<secret>``, e.g. ``ign_live_3f9a0c12b7de_<43 chars>``:

* ``env``: 2-16 lowercase letters and digits, starting with a letter (``live``, ``test``);
* ``keyid``: 12 lowercase hex digits, public, the lookup key in storage;
* ``secret``: 43 URL-safe base64 characters (256 random bits from :mod:`secrets`).

The prefix lets secret scanners spot leaked keys. Only ``HMAC-SHA256(pepper, secret)``
is stored, and checked with :func:`hmac.compare_digest`. Keys have high entropy, so a
slow password hash would only add latency.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

__all__ = [
    "KEY_PREFIX",
    "MAX_API_KEY_LENGTH",
    "MIN_PEPPER_BYTES",
    "ApiKeyStore",
    "GeneratedKey",
    "InMemoryApiKeyStore",
    "ParsedKey",
    "StoredKey",
    "generate_api_key",
    "hash_secret",
    "looks_like_api_key",
    "parse_api_key",
    "verify_secret",
]

KEY_PREFIX = "ign_"
KEY_ID_HEX_CHARS = 12
SECRET_CHARS = 43
SECRET_BYTES = 32
MIN_PEPPER_BYTES = 16
MAX_API_KEY_LENGTH = len(KEY_PREFIX) + 16 + 1 + KEY_ID_HEX_CHARS + 1 + SECRET_CHARS

_ENV_RE = re.compile(r"[a-z][a-z0-9]{1,15}")
_KEY_RE = re.compile(
    rf"ign_(?P<env>[a-z][a-z0-9]{{1,15}})_(?P<key_id>[0-9a-f]{{{KEY_ID_HEX_CHARS}}})"
    rf"_(?P<secret>[A-Za-z0-9_-]{{{SECRET_CHARS}}})"
)


@dataclass(frozen=True, slots=True)
class GeneratedKey:
    """A new key. ``token`` is what the caller sees, once; store only ``key_id`` and the
    hash of ``secret``. The repr hides both secrets."""

    env: str
    key_id: str
    secret: str = field(repr=False)
    token: str = field(repr=False)

    @property
    def last4(self) -> str:
        """The last four characters, to help a user tell their keys apart in a list."""
        return self.token[-4:]


@dataclass(frozen=True, slots=True)
class ParsedKey:
    """The parts of a well-formed key. The repr hides the secret."""

    env: str
    key_id: str
    secret: str = field(repr=False)


def generate_api_key(env: str) -> GeneratedKey:
    """Make a new key for ``env`` (e.g. ``"live"``, ``"test"``) with a random id and secret.

    Raises ``ValueError`` if ``env`` is not 2-16 lowercase letters and digits.
    """
    if not _ENV_RE.fullmatch(env):
        raise ValueError("env must be 2-16 lowercase letters and digits, starting with a letter")
    key_id = secrets.token_hex(KEY_ID_HEX_CHARS // 2)
    secret = secrets.token_urlsafe(SECRET_BYTES)
    return GeneratedKey(
        env=env, key_id=key_id, secret=secret, token=f"{KEY_PREFIX}{env}_{key_id}_{secret}"
    )


def looks_like_api_key(token: str) -> bool:
    """Whether ``token`` claims to be an Ignara key (it may still be malformed)."""
    return token.startswith(KEY_PREFIX)


def parse_api_key(token: str) -> ParsedKey | None:
    """Split a key into its parts, or ``None`` if it is not exactly in the key format."""
    if len(token) > MAX_API_KEY_LENGTH:
        return None
    match = _KEY_RE.fullmatch(token)
    if match is None:
        return None
    return ParsedKey(env=match["env"], key_id=match["key_id"], secret=match["secret"])


def hash_secret(secret: str, pepper: bytes) -> str:
    """``HMAC-SHA256(pepper, secret)`` as 64 lowercase hex digits.

    The pepper is a server-side secret kept out of the database, so a leaked table of
    hashes alone does not let anyone test guesses. Raises ``ValueError`` if it is shorter
    than ``MIN_PEPPER_BYTES``.
    """
    if len(pepper) < MIN_PEPPER_BYTES:
        raise ValueError(f"the API key pepper must be at least {MIN_PEPPER_BYTES} bytes")
    return hmac.new(pepper, secret.encode("utf-8"), hashlib.sha256).hexdigest()


def verify_secret(secret: str, stored_hash: str, pepper: bytes) -> bool:
    """Whether ``secret`` hashes to ``stored_hash``, compared in constant time.

    A malformed ``stored_hash`` is simply a mismatch.
    """
    expected = hash_secret(secret, pepper).encode("ascii")
    try:
        candidate = stored_hash.encode("ascii")
    except UnicodeEncodeError:
        return False
    return hmac.compare_digest(expected, candidate)


@dataclass(frozen=True, slots=True)
class StoredKey:
    """What storage holds about one key: never the secret itself."""

    key_id: str
    tenant: str
    principal: str
    secret_hash: str = field(repr=False)
    roles: frozenset[str] = frozenset()
    scopes: frozenset[str] = frozenset()
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    # After a rotation: the replaced secret's hash, accepted until previous_valid_until.
    previous_secret_hash: str | None = field(default=None, repr=False)
    previous_valid_until: datetime | None = None
    # The key's own token limits (resource -> tokens), below its queue's; empty: none.
    limits: tuple[tuple[str, int], ...] = ()


class ApiKeyStore(Protocol):
    """Where the authenticator looks keys up. ``tenants/`` implements it over SQL.

    ``touch`` records a successful use; it is called on every authenticated request, so
    an implementation may coalesce writes (e.g. update at most once a minute per key).
    """

    async def get(self, key_id: str) -> StoredKey | None: ...

    async def touch(self, key_id: str, when: datetime) -> None: ...


class InMemoryApiKeyStore:
    """An :class:`ApiKeyStore` in a dict, for tests and the embedded default."""

    def __init__(self, keys: Iterable[StoredKey] = ()) -> None:
        self._keys: dict[str, StoredKey] = {key.key_id: key for key in keys}
        self._last_used: dict[str, datetime] = {}

    def add(self, key: StoredKey) -> None:
        self._keys[key.key_id] = key

    def revoke(self, key_id: str, when: datetime) -> None:
        self._keys[key_id] = replace(self._keys[key_id], revoked_at=when)

    def last_used(self, key_id: str) -> datetime | None:
        return self._last_used.get(key_id)

    async def get(self, key_id: str) -> StoredKey | None:
        return self._keys.get(key_id)

    async def touch(self, key_id: str, when: datetime) -> None:
        if key_id in self._keys:
            self._last_used[key_id] = when
