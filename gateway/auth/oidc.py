"""OIDC access tokens (JWTs) checked against the issuer's published keys (JWKS).

A token is accepted only if, in this order:

1. it is at most ``max_token_bytes`` long and is a three-part JWS (no JWE, no JSON form);
2. its ``alg`` is in the configured allow-list, which may hold asymmetric algorithms only
   (so ``none`` and ``HS256``-signed-with-the-public-key confusion can never pass);
3. its ``kid`` names a signing key in the issuer's JWKS, fetched from the configured
   ``jwks_uri`` only (``jku``/``jwk``/``x5u`` headers are never followed);
4. the signature verifies with that key, for that algorithm (key type and curve checked);
5. ``iss``, ``aud``, ``exp`` and ``sub`` are present; ``iss`` and ``aud`` match; ``exp``,
   ``nbf`` and ``iat`` hold within ``leeway_seconds``; ``exp`` is not implausibly far off;
6. the tenant claim names a tenant, and roles and scopes are strings.

The JWKS is cached for ``jwks_ttl_seconds``. A ``kid`` not in the cache triggers a
refetch, but at most one fetch happens per ``jwks_refetch_min_interval_seconds``
however many such tokens arrive, so bogus ``kid`` values cannot hammer the issuer.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from joserfc import jws
from joserfc.errors import ClaimError, JoseError, MissingClaimError
from joserfc.errors import ExpiredTokenError as JoseExpiredTokenError
from joserfc.jwk import JWKRegistry, Key, RSAKey
from joserfc.jwt import JWTClaimsRegistry

from gateway.auth.errors import (
    ExpiredTokenError,
    InvalidAudienceError,
    InvalidIssuerError,
    InvalidTokenError,
    JwksUnavailableError,
    TokenNotYetValidError,
    TokenTooLargeError,
    UnknownKeyIdError,
    UnsupportedAlgorithmError,
)
from gateway.auth.identity import Identity
from tenants.services.access import SCOPES, scopes_for

__all__ = [
    "ASYMMETRIC_ALGORITHMS",
    "JwksCache",
    "OidcSettings",
    "OidcVerifier",
    "looks_like_jwt",
]

ASYMMETRIC_ALGORITHMS = frozenset(
    {
        "RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
        "ES256", "ES384", "ES512", "EdDSA", "Ed25519", "Ed448",
    }
)  # fmt: skip
"""The algorithms an allow-list may name: those verified with a public key."""

MIN_RSA_BITS = 2048
MAX_JWKS_KEYS = 64
MAX_HEADER_BYTES = 4096
MAX_ROLES = 64
MAX_NAME_CHARS = 256

_JWS_COMPACT_RE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
_TENANT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_LOOPBACK_HOSTS = frozenset({"localhost"})
IGNARA_SCOPES = frozenset(SCOPES)


def looks_like_jwt(token: str) -> bool:
    """Whether ``token`` has the shape of a compact JWS (it may still be anything but valid)."""
    return _JWS_COMPACT_RE.fullmatch(token) is not None


@dataclass(frozen=True, slots=True)
class OidcSettings:
    """How to trust one OIDC issuer. Raises ``ValueError`` on construction if unsafe.

    ``tenant_claim`` and ``roles_claim`` name a top-level claim (``"tenant"``, or a
    namespaced ``"https://ignara.example/tenant"``) or, when no such claim exists, a dotted
    path into nested objects (``"realm_access.roles"``, as Keycloak sends roles).
    ``scopes_claim`` holds a space-separated string or a list of strings; when it is the
    default ``"scope"`` and absent, ``"scp"`` (as Microsoft Entra names it) is read.

    A token speaks for a tenant. Its Ignara scopes (``inference``, ``workloads:read``,
    ...; others, such as ``openid``, are ignored) narrow what its roles allow; a token
    naming none of them may do all its roles allow. An ``admin`` role in a token grants
    nothing: platform admins use platform keys.
    """

    issuer: str
    audience: str
    jwks_uri: str
    algorithms: tuple[str, ...] = ("RS256", "ES256")
    leeway_seconds: int = 30
    tenant_claim: str = "tenant"
    roles_claim: str = "roles"
    scopes_claim: str = "scope"
    jwks_refetch_min_interval_seconds: float = 30.0
    jwks_ttl_seconds: float = 3600.0
    jwks_timeout_seconds: float = 5.0
    jwks_max_bytes: int = 256 * 1024
    max_token_bytes: int = 16 * 1024
    max_token_lifetime_seconds: int = 24 * 3600
    allow_insecure_jwks_uri: bool = False

    def __post_init__(self) -> None:
        if not self.issuer or not self.audience:
            raise ValueError("OIDC issuer and audience must not be empty")
        _check_jwks_uri(self.jwks_uri, allow_insecure=self.allow_insecure_jwks_uri)
        if not self.algorithms:
            raise ValueError("OIDC needs at least one allowed algorithm")
        refused = [alg for alg in self.algorithms if alg not in ASYMMETRIC_ALGORITHMS]
        if refused:
            raise ValueError(
                f"OIDC algorithms {refused} are not allowed: use asymmetric algorithms only"
                f" ({', '.join(sorted(ASYMMETRIC_ALGORITHMS))}); 'none' and HS* never are"
            )
        if not 0 <= self.leeway_seconds <= 300:
            raise ValueError("OIDC leeway_seconds must be between 0 and 300")
        positive = {
            "jwks_ttl_seconds": self.jwks_ttl_seconds,
            "jwks_timeout_seconds": self.jwks_timeout_seconds,
            "jwks_max_bytes": self.jwks_max_bytes,
            "max_token_bytes": self.max_token_bytes,
            "max_token_lifetime_seconds": self.max_token_lifetime_seconds,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ValueError(f"OIDC {name} must be positive")
        if self.jwks_refetch_min_interval_seconds < 0:
            raise ValueError("OIDC jwks_refetch_min_interval_seconds must not be negative")


def _check_jwks_uri(uri: str, *, allow_insecure: bool) -> None:
    parts = urlsplit(uri)
    if parts.scheme not in {"https", "http"} or not parts.hostname:
        raise ValueError("OIDC jwks_uri must be an absolute http(s) URL")
    if parts.scheme == "http" and not allow_insecure and not _is_loopback(parts.hostname):
        raise ValueError(
            "OIDC jwks_uri must use https (http only for loopback or with allow_insecure_jwks_uri)"
        )


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _JwksFetchError(Exception):
    """The JWKS could not be fetched or read; the message is for logs only."""


class JwksCache:
    """The issuer's signing keys by ``kid``, fetched with a bounded request and cached.

    * The cache is refreshed once it is ``ttl_seconds`` old; if that fails, the old keys
      are kept (an IdP outage does not lock everyone out).
    * A ``kid`` not in the cache triggers a refetch, but fetches (successful or not) are
      at least ``min_refetch_interval_seconds`` apart; concurrent callers share one fetch.
    * A fetch is bounded in time (``timeout_seconds``, in all) and size (``max_bytes``),
      follows no redirect and asks for no compression.

    ``fetch_count`` counts fetch attempts, for metrics and tests. Pass ``client`` to share
    an ``httpx.AsyncClient``; otherwise one is made on first use and closed by ``aclose``.
    """

    def __init__(
        self,
        jwks_uri: str,
        *,
        timeout_seconds: float = 5.0,
        max_bytes: int = 256 * 1024,
        ttl_seconds: float = 3600.0,
        min_refetch_interval_seconds: float = 30.0,
        client: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._uri = jwks_uri
        self._timeout = timeout_seconds
        self._max_bytes = max_bytes
        self._ttl = ttl_seconds
        self._min_interval = min_refetch_interval_seconds
        self._client = client
        self._owns_client = client is None
        self._clock = clock
        self._lock = asyncio.Lock()
        self._log = logging.getLogger(__name__)
        self._by_kid: dict[str, Key] = {}
        self._without_kid: list[Key] = []
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None
        self.fetch_count = 0

    @classmethod
    def from_settings(
        cls,
        settings: OidcSettings,
        *,
        client: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> JwksCache:
        return cls(
            settings.jwks_uri,
            timeout_seconds=settings.jwks_timeout_seconds,
            max_bytes=settings.jwks_max_bytes,
            ttl_seconds=settings.jwks_ttl_seconds,
            min_refetch_interval_seconds=settings.jwks_refetch_min_interval_seconds,
            client=client,
            clock=clock,
        )

    async def get_key(self, kid: str | None) -> Key:
        """The signing key for ``kid`` (or the only key, when a token names none).

        Raises ``UnknownKeyIdError`` if the issuer does not publish it, and
        ``JwksUnavailableError`` if no JWKS could be fetched yet.
        """
        if self._is_stale():
            await self._refresh()
        key = self._lookup(kid)
        if key is None:
            await self._refresh()
            key = self._lookup(kid)
        if key is not None:
            return key
        if self._fetched_at is None:
            raise JwksUnavailableError()
        raise UnknownKeyIdError()

    async def aclose(self) -> None:
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    def _is_stale(self) -> bool:
        return self._fetched_at is None or self._clock() - self._fetched_at >= self._ttl

    def _may_fetch(self) -> bool:
        return (
            self._attempted_at is None or self._clock() - self._attempted_at >= self._min_interval
        )

    def _lookup(self, kid: str | None) -> Key | None:
        if kid is not None:
            return self._by_kid.get(kid)
        everything = [*self._by_kid.values(), *self._without_kid]
        return everything[0] if len(everything) == 1 else None

    async def _refresh(self) -> None:
        """Fetch, unless a fetch was attempted too recently; if one is under way, await it."""
        if not self._lock.locked() and not self._may_fetch():
            return
        observed_attempt = self._attempted_at
        async with self._lock:
            if self._attempted_at != observed_attempt or not self._may_fetch():
                return  # another caller fetched while this one waited for the lock
            self._attempted_at = self._clock()
            self.fetch_count += 1
            try:
                document = await self._fetch()
                by_kid, without_kid = self._import_keys(document)
            except _JwksFetchError as err:
                self._log.warning("JWKS fetch from %s failed: %s", self._uri, err)
                return
            self._by_kid, self._without_kid = by_kid, without_kid
            self._fetched_at = self._attempted_at

    async def _fetch(self) -> object:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self._timeout), follow_redirects=False
            )
        try:
            async with asyncio.timeout(self._timeout):
                body = await self._read_bounded(self._client)
        except (httpx.HTTPError, TimeoutError) as err:
            raise _JwksFetchError(type(err).__name__) from err
        try:
            return json.loads(body)
        except ValueError as err:
            raise _JwksFetchError("the response is not JSON") from err

    async def _read_bounded(self, client: httpx.AsyncClient) -> bytes:
        headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        async with client.stream("GET", self._uri, headers=headers) as response:
            if response.status_code != 200:
                raise _JwksFetchError(f"HTTP status {response.status_code}")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self._max_bytes:
                raise _JwksFetchError(f"the response is larger than {self._max_bytes} bytes")
            body = bytearray()
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > self._max_bytes:
                    raise _JwksFetchError(f"the response is larger than {self._max_bytes} bytes")
        return bytes(body)

    def _import_keys(self, document: object) -> tuple[dict[str, Key], list[Key]]:
        if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
            raise _JwksFetchError("the response is not a JWKS (no 'keys' list)")
        by_kid: dict[str, Key] = {}
        without_kid: list[Key] = []
        for entry in document["keys"][:MAX_JWKS_KEYS]:
            key = self._import_key(entry)
            if key is None:
                continue
            if key.kid is None:
                without_kid.append(key)
            elif key.kid in by_kid:
                self._log.warning(
                    "JWKS from %s repeats kid %r; keeping the first", self._uri, key.kid
                )
            else:
                by_kid[key.kid] = key
        return by_kid, without_kid

    def _import_key(self, entry: object) -> Key | None:
        """One verification key, or ``None`` (logged) for anything that is not one."""
        if not isinstance(entry, dict):
            return None
        if entry.get("kty") not in {"RSA", "EC", "OKP"} or entry.get("use", "sig") != "sig":
            return None  # symmetric keys never verify a token from a public JWKS
        if "d" in entry:
            self._log.warning("JWKS from %s publishes a private key; ignoring it", self._uri)
            return None
        try:
            key = JWKRegistry.import_key(entry)
        except (JoseError, ValueError, TypeError) as err:
            self._log.warning("JWKS from %s holds a key that does not import: %s", self._uri, err)
            return None
        if isinstance(key, RSAKey) and key.public_key.key_size < MIN_RSA_BITS:
            self._log.warning(
                "JWKS from %s holds an RSA key under %d bits", self._uri, MIN_RSA_BITS
            )
            return None
        return key


class OidcVerifier:
    """Checks access tokens from one issuer and maps their claims to an :class:`Identity`."""

    def __init__(
        self,
        settings: OidcSettings,
        *,
        jwks: JwksCache | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.jwks = jwks or JwksCache.from_settings(settings)
        self._now = now
        # Unknown header parameters are ignored (RFC 7515 4.1); unknown "crit" ones are not.
        self._registry = jws.JWSRegistry(
            algorithms=list(settings.algorithms), strict_check_header=False
        )
        self._registry.max_header_length = MAX_HEADER_BYTES
        self._registry.max_payload_length = settings.max_token_bytes
        self._registry.max_signature_length = 1024

    async def verify_token(self, token: str) -> Identity:
        """The identity a valid token carries; raises an ``InvalidTokenError`` otherwise."""
        return self.identity_of(await self.verified_claims(token))

    async def verified_claims(self, token: str, *, audience: str | None = None) -> dict[str, Any]:
        """A valid token's claims, checked as :meth:`verify_token` checks them; for
        ``audience`` rather than the configured one when given (an ID token is for the
        client that asked for it)."""
        if len(token) > self.settings.max_token_bytes:
            raise TokenTooLargeError()
        if not looks_like_jwt(token):
            raise InvalidTokenError("The access token is not a signed JWT.")
        try:
            signed = jws.extract_compact(token.encode("ascii"), registry=self._registry)
            header = signed.headers()
        except (JoseError, ValueError) as err:
            raise InvalidTokenError("The access token's header cannot be read.") from err
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.settings.algorithms:
            raise UnsupportedAlgorithmError()
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise InvalidTokenError("The access token's key id is not a string.")
        key = await self.jwks.get_key(kid)
        try:
            verified = jws.validate_compact(signed, key, registry=self._registry)
        except JoseError as err:
            raise InvalidTokenError("The access token's signature does not verify.") from err
        if not verified:
            raise InvalidTokenError("The access token's signature does not verify.")
        claims = _claims_object(signed.payload)
        self._validate_claims(claims, audience or self.settings.audience)
        return claims

    async def aclose(self) -> None:
        await self.jwks.aclose()

    def _validate_claims(self, claims: dict[str, Any], audience: str) -> None:
        now = int(self._now())
        registry = JWTClaimsRegistry(
            now=now,
            leeway=self.settings.leeway_seconds,
            iss={"essential": True, "value": self.settings.issuer},
            aud={"essential": True, "value": audience},
            exp={"essential": True},
            sub={"essential": True},
        )
        try:
            registry.validate(claims)
        except JoseExpiredTokenError as err:
            raise ExpiredTokenError() from err
        except ClaimError as err:
            raise _claim_error(err) from err
        latest = now + self.settings.max_token_lifetime_seconds + self.settings.leeway_seconds
        if claims["exp"] > latest:
            raise InvalidTokenError("The access token's expiry is implausibly far in the future.")

    def identity_of(self, claims: Mapping[str, Any]) -> Identity:
        """The identity verified claims map to: tenant, roles and scopes from the
        configured claims (an ``admin`` role grants nothing: see :class:`OidcSettings`)."""
        settings = self.settings
        tenant = _claim(claims, settings.tenant_claim)
        if not isinstance(tenant, str) or not _TENANT_RE.fullmatch(tenant):
            raise InvalidTokenError(
                f"The access token has no valid '{settings.tenant_claim}' claim."
            )
        subject = claims["sub"]
        if len(subject) > MAX_NAME_CHARS:
            raise InvalidTokenError("The access token's subject is too long.")
        roles = _string_set(claims, settings.roles_claim)
        named = _string_set(claims, settings.scopes_claim)
        if settings.scopes_claim == "scope" and "scope" not in claims:
            named = _string_set(claims, "scp")
        scopes = named & IGNARA_SCOPES or scopes_for(roles, platform=False)
        return Identity(tenant=tenant, principal=subject, roles=roles, scopes=scopes, via="oidc")


def _claims_object(payload: bytes | None) -> dict[str, Any]:
    try:
        claims = json.loads(payload or b"")
    except ValueError as err:
        raise InvalidTokenError("The access token's claims are not JSON.") from err
    if not isinstance(claims, dict):
        raise InvalidTokenError("The access token's claims are not a JSON object.")
    return claims


def _claim_error(err: ClaimError) -> InvalidTokenError:
    if isinstance(err, MissingClaimError):
        # err.claim lists the missing claims' names (e.g. "exp,sub"), never values.
        return InvalidTokenError(f"The access token lacks required claims: {err.claim}.")
    if err.claim == "iss":
        return InvalidIssuerError()
    if err.claim == "aud":
        return InvalidAudienceError()
    if err.claim in {"nbf", "iat"}:
        return TokenNotYetValidError()
    return InvalidTokenError(f"The access token has an invalid '{err.claim}' claim.")


def _claim(claims: Mapping[str, Any], name: str) -> object:
    """A claim by its name, or by a dotted path into nested objects if no claim has the name."""
    if name in claims:
        return claims[name]
    value: object = claims
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _string_set(claims: Mapping[str, Any], name: str) -> frozenset[str]:
    """A claim holding a list of strings or one space-separated string; absent is empty."""
    value = _claim(claims, name)
    if value is None:
        return frozenset()
    items = value.split() if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise InvalidTokenError(f"The access token's '{name}' claim is not a list of strings.")
    if len(items) > MAX_ROLES or any(len(item) > MAX_NAME_CHARS for item in items):
        raise InvalidTokenError(f"The access token's '{name}' claim is too large.")
    return frozenset(items)
