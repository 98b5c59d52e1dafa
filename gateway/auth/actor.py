"""What a console session acts as, without holding the key it signed in with.

A console session is shared by every replica through the database, which must never
hold a usable credential. So a session keeps a :class:`SessionActor`: a reference the
authenticator checks again on every API call the console makes (:meth:`Authenticator.
authenticate_actor`) exactly as it checks a bearer token: a key revoked, expired or
rotated past its grace meanwhile, or a bootstrap key changed, fails that call with 401.

The console hands it to the API in-process, in the ASGI scope under
:data:`ACTOR_SCOPE_KEY`: only code inside the gateway can put anything there (a server
builds the scope of a network request), so no client can claim an actor.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ACTOR_SCOPE_KEY",
    "ActorKind",
    "SessionActor",
    "keyed_fingerprint",
    "secret_fingerprint",
]

ACTOR_SCOPE_KEY = "ignara.session_actor"

ActorKind = Literal["api-key", "bootstrap", "oidc"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionActor:
    """``api-key``: ``key_id`` and the fingerprint of the secret that signed in (the
    current one, or a rotation's old one while its grace lasts). ``bootstrap``: a keyed
    fingerprint of the bootstrap key. ``oidc``: the principal as its ID token mapped
    (``tenant``, ``roles``, ``scopes``); there is no key to revoke, so the session's own
    timeouts bound it."""

    kind: ActorKind
    principal: str
    tenant: str
    roles: frozenset[str] = frozenset()
    scopes: frozenset[str] = frozenset()
    key_id: str | None = None
    fingerprint: str | None = None


def secret_fingerprint(secret_hash: str) -> str:
    """Which stored secret of a key signed in, told apart without revealing it: a hash
    of its stored (already keyed) hash."""
    return hashlib.sha256(b"ignara-console-secret\0" + secret_hash.encode()).hexdigest()[:32]


def keyed_fingerprint(pepper: bytes, value: bytes) -> str:
    """A fingerprint no one without the pepper can test guesses against."""
    return hmac.new(pepper, b"ignara-console-bootstrap\0" + value, hashlib.sha256).hexdigest()[:32]
