"""The SQL key store hands the authenticator each key's own roles and scopes; a
platform key speaks for no tenant; a disabled principal's keys count as revoked."""

from __future__ import annotations

from sqlmodel import select

from gateway.auth import ANY_TENANT
from gateway.auth.store import SqlApiKeyStore
from tenants import Database, parse_config
from tenants.models import Principal
from tenants.models._base import utcnow
from tenants.services import apply_config
from tenants.services.api_keys import add_api_key


async def test_keys_come_with_their_own_powers(database: Database) -> None:
    async with database.session() as session:
        await apply_config(session, parse_config({"tenants": [{"name": "alpha"}]}), actor="t")
        for key_id, tenant, roles, scopes in (
            ("aaaaaaaaaaaa", "alpha", ["member"], ["usage:read"]),
            ("bbbbbbbbbbbb", "alpha", ["tenant-admin"], None),
            ("cccccccccccc", None, ["admin"], ["admin"]),
        ):
            await add_api_key(
                session,
                tenant=tenant,
                principal="same-name",
                roles=roles,
                scopes=scopes,
                key_id=key_id,
                secret_hash="0" * 64,
                actor="t",
            )
    store = SqlApiKeyStore(database)
    member, boss, platform = [await store.get(k * 12) for k in "abc"]
    assert member is not None and boss is not None and platform is not None
    assert (member.roles, member.scopes) == ({"member"}, {"usage:read"})
    assert boss.roles == {"tenant-admin"} and {"keys:write", "inference"} <= boss.scopes
    assert (platform.tenant, platform.roles) == (ANY_TENANT, {"admin"})
    async with database.session() as session:
        for principal in (await session.exec(select(Principal))).all():
            if principal.tenant == "alpha":
                principal.disabled_at = utcnow()
                session.add(principal)
    member = await store.get("a" * 12)
    platform = await store.get("c" * 12)
    assert member is not None and member.revoked_at is not None
    assert platform is not None and platform.revoked_at is None
