"""API keys as rows: the public id and a keyed hash of the secret, never the secret.

Generating keys and hashing secrets happen in the gateway (it holds the pepper);
these functions store, find, use and revoke what it made.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from tenants.errors import NotFoundError
from tenants.models import ApiKey, AuditEntry, Principal, Tenant
from tenants.models._base import utcnow

__all__ = [
    "ROLES",
    "KeyRecord",
    "add_api_key",
    "find_api_key",
    "list_api_keys",
    "revoke_api_key",
    "touch_api_key",
]

ROLES = frozenset({"admin", "tenant-admin", "member"})

KeyRecord = tuple[ApiKey, Principal]


async def _principal(
    session: AsyncSession, tenant: str, name: str, roles: Sequence[str]
) -> Principal:
    found = (
        await session.exec(
            select(Principal).where(Principal.tenant == tenant, Principal.name == name)
        )
    ).first()
    if found is None:
        found = Principal(tenant=tenant, name=name, kind="service-account", roles=sorted(roles))
        session.add(found)
        await session.flush()
    elif sorted(found.roles) != sorted(roles):
        found.roles = sorted(roles)
        session.add(found)
    return found


async def add_api_key(
    session: AsyncSession,
    *,
    tenant: str,
    principal: str,
    roles: Sequence[str],
    key_id: str,
    secret_hash: str,
    scopes: Sequence[str] = (),
    expires_at: datetime | None = None,
    actor: str,
) -> ApiKey:
    unknown = set(roles) - ROLES
    if unknown:
        raise ValueError(f"unknown role {sorted(unknown)[0]!r}; roles are {sorted(ROLES)}")
    if await session.get(Tenant, tenant) is None:
        raise NotFoundError(f"tenant {tenant!r} does not exist")
    owner = await _principal(session, tenant, principal, roles)
    key = ApiKey(
        key_id=key_id,
        tenant=tenant,
        principal_id=owner.id,
        secret_hash=secret_hash,
        scopes=list(scopes),
        expires_at=expires_at,
    )
    session.add(key)
    session.add(
        AuditEntry(
            actor=actor,
            action="create",
            kind="api_key",
            name=key_id,
            tenant=tenant,
            detail={"principal": principal, "roles": sorted(roles), "scopes": list(scopes)},
        )
    )
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


async def list_api_keys(session: AsyncSession, tenant: str) -> Sequence[ApiKey]:
    query = select(ApiKey).where(ApiKey.tenant == tenant).order_by(col(ApiKey.created_at))
    return (await session.exec(query)).all()


async def touch_api_key(session: AsyncSession, key_id: str, when: datetime) -> None:
    key = await session.get(ApiKey, key_id)
    if key is not None:
        key.last_used_at = when
        session.add(key)


async def revoke_api_key(session: AsyncSession, tenant: str, key_id: str, *, actor: str) -> ApiKey:
    """Revoke one of ``tenant``'s keys (another tenant's key is simply not found)."""
    key = await session.get(ApiKey, key_id)
    if key is None or key.tenant != tenant:
        raise NotFoundError(f"API key {key_id!r} not found")
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        session.add(key)
        session.add(
            AuditEntry(
                actor=actor, action="revoke", kind="api_key", name=key_id, tenant=tenant, detail={}
            )
        )
    return key
