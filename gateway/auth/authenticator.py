"""From an ``Authorization`` header to an :class:`Identity`, or an ``AuthenticationError``.

One bearer token, three kinds, tried in this order:

1. the bootstrap admin key (``IGNARA_ADMIN_KEY``), compared in constant time, so a fresh
   deployment can be administered before any key exists;
2. an Ignara API key (``ign_...``): looked up by key id, secret checked against the stored
   HMAC (or, while a rotation's grace lasts, the replaced secret's), then revocation and
   expiry (only after the secret matched, so a caller without the secret learns nothing
   about a key), and its last use recorded;
3. a JWT, when OIDC is configured: checked by :class:`OidcVerifier`.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable
from datetime import UTC, datetime

from gateway.auth.actor import SessionActor, keyed_fingerprint, secret_fingerprint
from gateway.auth.errors import (
    ExpiredApiKeyError,
    InvalidApiKeyError,
    InvalidCredentialsError,
    MissingCredentialsError,
    RevokedApiKeyError,
    TokenTooLargeError,
)
from gateway.auth.identity import ANY_TENANT, Identity
from gateway.auth.keys import (
    MIN_PEPPER_BYTES,
    ApiKeyStore,
    StoredKey,
    looks_like_api_key,
    parse_api_key,
    verify_secret,
)
from gateway.auth.oidc import OidcVerifier, looks_like_jwt
from tenants.services.access import ADMIN, scopes_for

__all__ = [
    "BOOTSTRAP_PRINCIPAL",
    "MIN_BOOTSTRAP_KEY_CHARS",
    "Authenticator",
    "bearer_token",
]

BOOTSTRAP_PRINCIPAL = "bootstrap-admin"
MIN_BOOTSTRAP_KEY_CHARS = 16
DEFAULT_MAX_TOKEN_BYTES = 16 * 1024
_NO_SUCH_HASH = "0" * 64
_WHITESPACE = re.compile(r"\s")  # what str.isspace() calls whitespace


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _as_utc(moment: datetime) -> datetime:
    """Naive datetimes (as SQLite hands them back) are taken to be UTC."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def bearer_token(authorization: str | None, *, max_bytes: int = DEFAULT_MAX_TOKEN_BYTES) -> str:
    """The token of an ``Authorization: Bearer <token>`` header value."""
    if authorization is None or not authorization.strip():
        raise MissingCredentialsError()
    if len(authorization) > max_bytes + 64:
        raise TokenTooLargeError()
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer":
        raise InvalidCredentialsError("Use the Bearer scheme: 'Authorization: Bearer <token>'.")
    if not token or _WHITESPACE.search(token):
        raise InvalidCredentialsError("The Authorization header must carry one bearer token.")
    return token


class Authenticator:
    """Authenticates bearer tokens. Each credential kind is optional.

    ``api_keys`` and ``pepper`` (at least ``MIN_PEPPER_BYTES``) enable API keys;
    ``api_key_env``, if set, refuses keys of any other environment (a ``live`` gateway
    refusing ``test`` keys). ``oidc`` enables access tokens. ``bootstrap_key`` (at least
    ``MIN_BOOTSTRAP_KEY_CHARS``) is the ``IGNARA_ADMIN_KEY`` value. Raises ``ValueError``
    on a weak pepper or bootstrap key.
    """

    def __init__(
        self,
        *,
        api_keys: ApiKeyStore | None = None,
        pepper: bytes | None = None,
        oidc: OidcVerifier | None = None,
        bootstrap_key: str | None = None,
        api_key_env: str | None = None,
        max_token_bytes: int = DEFAULT_MAX_TOKEN_BYTES,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        if api_keys is not None and (pepper is None or len(pepper) < MIN_PEPPER_BYTES):
            raise ValueError(f"API keys need a pepper of at least {MIN_PEPPER_BYTES} bytes")
        if bootstrap_key is not None and len(bootstrap_key) < MIN_BOOTSTRAP_KEY_CHARS:
            raise ValueError(
                f"the bootstrap admin key must be at least {MIN_BOOTSTRAP_KEY_CHARS} characters"
            )
        self._api_keys = api_keys
        self._pepper = pepper or b""
        self._oidc = oidc
        self._bootstrap_digest = _digest(bootstrap_key) if bootstrap_key is not None else None
        self._api_key_env = api_key_env
        self._max_token_bytes = max_token_bytes
        self._clock = clock

    async def authenticate(self, authorization: str | None) -> Identity:
        """The identity behind an ``Authorization`` header value (``None`` if absent)."""
        return await self.authenticate_token(
            bearer_token(authorization, max_bytes=self._max_token_bytes)
        )

    async def authenticate_token(self, token: str) -> Identity:
        """The identity behind a bearer token."""
        if len(token) > self._max_token_bytes:
            raise TokenTooLargeError()
        if self._is_bootstrap_key(token):
            return Identity(
                tenant=ANY_TENANT,
                principal=BOOTSTRAP_PRINCIPAL,
                roles=frozenset({ADMIN}),
                scopes=scopes_for({ADMIN}, platform=True),
                via="bootstrap",
            )
        if looks_like_api_key(token):
            return await self._authenticate_api_key(token)
        if looks_like_jwt(token):
            if self._oidc is None:
                raise InvalidCredentialsError("This gateway accepts API keys, not access tokens.")
            return await self._oidc.verify_token(token)
        raise InvalidCredentialsError()

    async def sign_in(self, token: str) -> tuple[Identity, SessionActor]:
        """The identity behind a bearer token (as :meth:`authenticate_token`) and the
        reference a console session keeps instead of the token: an API key's id and
        which of its secrets matched, or the bootstrap key's keyed fingerprint. OIDC
        access tokens do not sign in here (the console has its own OIDC sign-in)."""
        identity = await self.authenticate_token(token)
        if identity.via == "bootstrap":
            return identity, SessionActor(
                kind="bootstrap",
                principal=identity.principal,
                tenant=identity.tenant,
                roles=identity.roles,
                fingerprint=self._bootstrap_fingerprint(),
            )
        if identity.via != "api-key" or identity.key_id is None:
            raise InvalidCredentialsError("Sign in with an API key.")
        parsed = parse_api_key(token)
        stored = await self._api_keys.get(identity.key_id) if self._api_keys else None
        if parsed is None or stored is None:
            raise InvalidApiKeyError()
        matched = (
            stored.secret_hash
            if verify_secret(parsed.secret, stored.secret_hash, self._pepper)
            else stored.previous_secret_hash
        )
        if matched is None:
            raise InvalidApiKeyError()
        return identity, SessionActor(
            kind="api-key",
            principal=identity.principal,
            tenant=identity.tenant,
            roles=identity.roles,
            key_id=stored.key_id,
            fingerprint=secret_fingerprint(matched),
        )

    async def authenticate_actor(self, actor: SessionActor) -> Identity:
        """The identity a console session acts as, checked now as a bearer token would
        be: the key still exists, is neither revoked nor expired, and the secret that
        signed in is still its secret (or a rotation's old one in its grace)."""
        if actor.kind == "bootstrap":
            if self._bootstrap_digest is None or not hmac.compare_digest(
                actor.fingerprint or "", self._bootstrap_fingerprint()
            ):
                raise InvalidCredentialsError("The bootstrap admin key has changed.")
            return Identity(
                tenant=ANY_TENANT,
                principal=BOOTSTRAP_PRINCIPAL,
                roles=frozenset({ADMIN}),
                scopes=scopes_for({ADMIN}, platform=True),
                via="bootstrap",
            )
        if actor.kind == "oidc":
            if self._oidc is None:
                raise InvalidCredentialsError("This gateway no longer accepts OIDC sign-ins.")
            return Identity(
                tenant=actor.tenant,
                principal=actor.principal,
                roles=actor.roles,
                scopes=actor.scopes,
                via="oidc",
            )
        if actor.key_id is None or self._api_keys is None:
            raise InvalidApiKeyError()
        stored = await self._api_keys.get(actor.key_id)
        if stored is None:
            raise InvalidApiKeyError()
        now = self._clock()
        if not _fingerprint_matches(actor.fingerprint or "", stored, now):
            raise InvalidApiKeyError()
        _check_usable(stored, now)
        await self._api_keys.touch(stored.key_id, now)
        return Identity(
            tenant=stored.tenant,
            principal=stored.principal,
            roles=stored.roles,
            scopes=stored.scopes,
            via="api-key",
            key_id=stored.key_id,
        )

    def _bootstrap_fingerprint(self) -> str:
        # Keyed with the pepper: the database holds sessions, and must not let anyone
        # test guesses of the bootstrap key against them.
        return keyed_fingerprint(self._pepper or b"-", self._bootstrap_digest or b"")

    async def aclose(self) -> None:
        """Release the OIDC verifier's HTTP client, if any."""
        if self._oidc is not None:
            await self._oidc.aclose()

    def _is_bootstrap_key(self, token: str) -> bool:
        if self._bootstrap_digest is None:
            return False
        return hmac.compare_digest(_digest(token), self._bootstrap_digest)

    async def _authenticate_api_key(self, token: str) -> Identity:
        parsed = parse_api_key(token)
        if parsed is None or self._api_keys is None:
            raise InvalidApiKeyError()
        if self._api_key_env is not None and parsed.env != self._api_key_env:
            raise InvalidApiKeyError()
        stored = await self._api_keys.get(parsed.key_id)
        if stored is None:
            verify_secret(parsed.secret, _NO_SUCH_HASH, self._pepper)  # same work as a hit
            raise InvalidApiKeyError()
        now = self._clock()
        if not _secret_matches(parsed.secret, stored, now, self._pepper):
            raise InvalidApiKeyError()
        _check_usable(stored, now)
        await self._api_keys.touch(stored.key_id, now)
        return Identity(
            tenant=stored.tenant,
            principal=stored.principal,
            roles=stored.roles,
            scopes=stored.scopes,
            via="api-key",
            key_id=stored.key_id,
            key_limits=stored.limits,
        )


def _secret_matches(secret: str, stored: StoredKey, now: datetime, pepper: bytes) -> bool:
    """The current secret, or the one a rotation replaced while its grace lasts. Both
    are checked every time, so the answer takes as long whichever matched."""
    current = verify_secret(secret, stored.secret_hash, pepper)
    previous = verify_secret(secret, stored.previous_secret_hash or _NO_SUCH_HASH, pepper)
    in_grace = (
        stored.previous_secret_hash is not None
        and stored.previous_valid_until is not None
        and now < _as_utc(stored.previous_valid_until)
    )
    return current or (previous and in_grace)


def _fingerprint_matches(fingerprint: str, stored: StoredKey, now: datetime) -> bool:
    """Whether the secret a session signed in with is still one the key accepts."""
    if hmac.compare_digest(fingerprint, secret_fingerprint(stored.secret_hash)):
        return True
    previous = stored.previous_secret_hash
    return (
        previous is not None
        and stored.previous_valid_until is not None
        and now < _as_utc(stored.previous_valid_until)
        and hmac.compare_digest(fingerprint, secret_fingerprint(previous))
    )


def _check_usable(stored: StoredKey, now: datetime) -> None:
    if stored.revoked_at is not None:
        raise RevokedApiKeyError()
    if stored.expires_at is not None and _as_utc(stored.expires_at) <= now:
        raise ExpiredApiKeyError()


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()
