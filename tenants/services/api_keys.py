"""API keys as rows: the public id, a keyed hash of the secret (never the secret), and
the key's own roles and scopes, fixed when it is issued.

Generating keys and hashing secrets happen in the gateway (it holds the pepper); these
functions store, find, use and revoke what it made. Who may issue or revoke which key
is the policy's question, asked before these run; what a key may hold at all is
checked here again (:mod:`tenants.services.access`). A key's powers are immutable: to
change its roles or scopes, issue a new one and revoke the old. Its own token limits
(``tokens-per-minute``, ``tokens-per-day``: a level below its queue in the token
ledger, so a leaked or runaway key spends at most that) may change any time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from tenants.errors import ConflictError, InvalidRequestError, NotFoundError
from tenants.models import ApiKey, AuditEntry, Principal
from tenants.models._base import new_id, utcnow
from tenants.services.access import key_roles, key_scopes
from tenants.services.tenants import lock_live_tenant

__all__ = [
    "KEY_LIMITS",
    "MAX_KEY_LIMIT",
    "KeyRecord",
    "add_api_key",
    "check_key_limits",
    "find_api_key",
    "get_api_key",
    "has_platform_admin",
    "key_limits_of",
    "list_api_keys",
    "principal_for",
    "revoke_api_key",
    "rotate_api_key",
    "set_api_key_limits",
    "touch_api_key",
]

KeyRecord = tuple[ApiKey, Principal]

# What a key may limit of its own, as the quota config names it -> its column.
KEY_LIMITS = {"tokens-per-minute": "tokens_per_minute", "tokens-per-day": "tokens_per_day"}
# A trillion tokens: far past any real limit, well inside what the ledger counts exactly.
MAX_KEY_LIMIT = 10**12


def check_key_limits(raw: Any, *, field: str = "limits") -> dict[str, int | None]:
    """A key's limits as asked (``{"tokens-per-minute": N, "tokens-per-day": N}``, a
    null value to lift one), checked: ``InvalidRequestError`` naming the field for
    anything but whole numbers from 1 to :data:`MAX_KEY_LIMIT` of those two."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidRequestError(f"{field}: an object of {', '.join(KEY_LIMITS)} is expected")
    limits: dict[str, int | None] = {}
    for name, value in raw.items():
        where = f"{field}.{str(name)[:64]}"
        if name not in KEY_LIMITS:
            raise InvalidRequestError(f"{where}: a key may limit only {', '.join(KEY_LIMITS)}")
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_KEY_LIMIT
        ):
            raise InvalidRequestError(
                f"{where}: a whole number of tokens from 1 to {MAX_KEY_LIMIT} (or null) is expected"
            )
        limits[name] = value
    return limits


def key_limits_of(key: ApiKey) -> dict[str, int]:
    """The limits a key carries (only those it has)."""
    limits = {name: getattr(key, column) for name, column in KEY_LIMITS.items()}
    return {name: value for name, value in limits.items() if value is not None}


def _of(tenant: str | None) -> ColumnElement[bool]:
    """Rows of ``tenant``'s, or of the platform's (``None``)."""
    return col(Principal.tenant).is_(None) if tenant is None else col(Principal.tenant) == tenant


async def principal_for(session: AsyncSession, tenant: str | None, name: str) -> Principal:
    """The principal ``name`` of ``tenant`` (``None``: of the platform), made if new.

    Callers racing to make the same one all get it: the insert does nothing where the
    unique constraint says the principal exists, and the read after it sees the one
    that won (never check-then-insert)."""
    dialect = (await session.connection()).dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    await session.exec(
        insert(Principal)
        .values(id=new_id(), tenant=tenant, name=name, kind="service-account", created_at=utcnow())
        .on_conflict_do_nothing()
    )
    query = select(Principal).where(_of(tenant), col(Principal.name) == name)
    return (await session.exec(query.execution_options(populate_existing=True))).one()


async def add_api_key(
    session: AsyncSession,
    *,
    tenant: str | None,
    principal: str,
    roles: Sequence[str],
    scopes: Sequence[str] | None,
    key_id: str,
    secret_hash: str,
    expires_at: datetime | None = None,
    actor: str,
    limits: Mapping[str, int | None] | None = None,
) -> ApiKey:
    """Store a key of ``tenant`` (``None``: a platform key) for ``principal`` with
    exactly these roles and scopes (``None``: all the roles allow) and token
    ``limits`` of its own; no other key changes. Raises ``InvalidRequestError`` for
    roles or scopes no key may hold or limits out of bounds, ``NotFoundError`` for a
    tenant that does not exist (or was deleted)."""
    platform = tenant is None
    roles = key_roles(roles, platform=platform)
    scopes = key_scopes(roles, scopes, platform=platform)
    checked = check_key_limits(limits)
    if tenant is not None:
        await lock_live_tenant(session, tenant)
    owner = await principal_for(session, tenant, principal)
    if owner.disabled_at is not None:
        raise ConflictError(f"principal {principal!r} is disabled")
    key = ApiKey(
        key_id=key_id,
        tenant=tenant,
        principal_id=owner.id,
        secret_hash=secret_hash,
        roles=roles,
        scopes=scopes,
        expires_at=expires_at,
    )
    for name, value in checked.items():
        setattr(key, KEY_LIMITS[name], value)
    session.add(key)
    session.add(
        AuditEntry(
            actor=actor,
            action="create",
            kind="api_key",
            name=key_id,
            tenant=tenant,
            detail={
                "principal": principal,
                "roles": roles,
                "scopes": scopes,
                "platform": platform,
                "expires_at": expires_at.isoformat() if expires_at else None,
                "limits": key_limits_of(key),
            },
        )
    )
    await session.flush()
    return key


async def set_api_key_limits(
    session: AsyncSession,
    tenant: str | None,
    key_id: str,
    limits: Mapping[str, int | None],
    *,
    actor: str,
) -> ApiKey:
    """Set (a number) or lift (``None``) the named limits of one of ``tenant``'s keys
    (``None``: a platform key); the others stay. Raises ``NotFoundError`` (another
    tenant's key, too), ``InvalidRequestError`` for limits out of bounds,
    ``ConflictError`` for a revoked key."""
    checked = check_key_limits(limits)
    key, _ = await get_api_key(session, tenant, key_id)
    if key.revoked_at is not None:
        raise ConflictError(f"API key {key_id!r} is revoked")
    before = key_limits_of(key)
    for name, value in checked.items():
        setattr(key, KEY_LIMITS[name], value)
    after = key_limits_of(key)
    if after != before:
        session.add(key)
        session.add(
            AuditEntry(
                actor=actor,
                action="update",
                kind="api_key",
                name=key_id,
                tenant=tenant,
                detail={"limits": after, "previous_limits": before},
            )
        )
        await session.flush()
    return key


async def find_api_key(session: AsyncSession, key_id: str) -> KeyRecord | None:
    row = (
        await session.exec(
            select(ApiKey, Principal)
            .join(Principal, col(Principal.id) == col(ApiKey.principal_id))
            .where(ApiKey.key_id == key_id)
        )
    ).first()
    return None if row is None else (row[0], row[1])


async def get_api_key(session: AsyncSession, tenant: str | None, key_id: str) -> KeyRecord:
    """One of ``tenant``'s keys (``None``: a platform key); any other is not found."""
    found = await find_api_key(session, key_id)
    if found is None or found[0].tenant != tenant:
        raise NotFoundError(f"API key {key_id!r} not found")
    return found


async def list_api_keys(session: AsyncSession, tenant: str | None) -> Sequence[KeyRecord]:
    """``tenant``'s keys (``None``: the platform keys), oldest first."""
    owned = col(ApiKey.tenant).is_(None) if tenant is None else col(ApiKey.tenant) == tenant
    query = (
        select(ApiKey, Principal)
        .join(Principal, col(Principal.id) == col(ApiKey.principal_id))
        .where(owned)
        .order_by(col(ApiKey.created_at), col(ApiKey.key_id))
    )
    return [(key, principal) for key, principal in (await session.exec(query)).all()]


async def touch_api_key(session: AsyncSession, key_id: str, when: datetime) -> None:
    key = await session.get(ApiKey, key_id)
    if key is not None:
        key.last_used_at = when
        session.add(key)


async def revoke_api_key(
    session: AsyncSession,
    tenant: str | None,
    key_id: str,
    *,
    actor: str,
    reason: str | None = None,
    action: str = "revoke",
) -> ApiKey:
    """Revoke one of ``tenant``'s keys (``None``: a platform key); another tenant's key
    is simply not found. Revoking twice changes nothing. ``reason`` stays on the key's
    record for its owner to read; ``action`` names the change in the audit log
    (``expire`` for a key expired by its tenant's idle-key policy)."""
    key, _ = await get_api_key(session, tenant, key_id)
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        key.revoked_reason = reason
        session.add(key)
        session.add(
            AuditEntry(
                actor=actor,
                action=action,
                kind="api_key",
                name=key_id,
                tenant=tenant,
                detail={} if reason is None else {"reason": reason},
            )
        )
    return key


async def rotate_api_key(
    session: AsyncSession,
    tenant: str | None,
    key_id: str,
    *,
    secret_hash: str,
    grace: timedelta,
    actor: str,
) -> ApiKey:
    """Give one of ``tenant``'s keys (``None``: a platform key) a new secret (its hash,
    ``secret_hash``); the current secret stays valid for ``grace`` more, then is refused.
    The key's id, roles, scopes and history stay. A secret replaced before by a rotation
    whose grace has not ended ends now: at most two secrets are ever valid. Raises
    ``NotFoundError`` (another tenant's key, too), ``ConflictError`` for a revoked or
    expired key."""
    key, _ = await get_api_key(session, tenant, key_id)
    now = utcnow()
    if key.revoked_at is not None:
        raise ConflictError(f"API key {key_id!r} is revoked: issue a new key instead")
    if key.expires_at is not None and key.expires_at <= now:
        raise ConflictError(f"API key {key_id!r} has expired: issue a new key instead")
    key.previous_secret_hash = key.secret_hash if grace > timedelta(0) else None
    key.previous_valid_until = now + grace if grace > timedelta(0) else None
    key.secret_hash = secret_hash
    key.rotated_at = now
    session.add(key)
    session.add(
        AuditEntry(
            actor=actor,
            action="rotate",
            kind="api_key",
            name=key_id,
            tenant=tenant,
            detail={
                "grace_seconds": int(grace.total_seconds()),
                "previous_valid_until": (
                    key.previous_valid_until.isoformat() if key.previous_valid_until else None
                ),
            },
        )
    )
    await session.flush()
    return key


async def has_platform_admin(session: AsyncSession) -> bool:
    """Whether some platform key could administer the gateway now."""
    now = utcnow()
    query = (
        select(ApiKey.key_id)
        .join(Principal, col(Principal.id) == col(ApiKey.principal_id))
        .where(
            col(ApiKey.tenant).is_(None),
            col(ApiKey.revoked_at).is_(None),
            col(ApiKey.expires_at).is_(None) | (col(ApiKey.expires_at) > now),
            col(Principal.disabled_at).is_(None),
        )
        .limit(1)
    )
    return (await session.exec(query)).first() is not None
