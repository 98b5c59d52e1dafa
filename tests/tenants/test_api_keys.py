"""API keys in SQL: stored as hashes with their own roles and scopes, found with their
principal, revoked per tenant; principals made once however many race to make them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlmodel import col, func, select

from tenants import ConflictError, Database, InvalidRequestError, NotFoundError, parse_config
from tenants.models import ApiKey, AuditEntry, Principal
from tenants.models._base import utcnow
from tenants.services import apply_config
from tenants.services.api_keys import (
    add_api_key,
    find_api_key,
    get_api_key,
    has_platform_admin,
    list_api_keys,
    revoke_api_key,
    touch_api_key,
)

CONFIG = {"tenants": [{"name": "alpha"}, {"name": "beta"}]}
MEMBER_SCOPES = ["inference", "usage:read", "workloads:read", "workloads:write"]


async def configured(database: Database) -> None:
    async with database.session() as session:
        await apply_config(session, parse_config(CONFIG), actor="test")


async def add(database: Database, key_id: str, **fields: Any) -> ApiKey:
    values: dict[str, Any] = {
        "tenant": "alpha",
        "principal": "ci-bot",
        "roles": ["member"],
        "scopes": MEMBER_SCOPES,
        "secret_hash": "f" * 64,
        "actor": "admin",
    }
    values.update(fields)
    async with database.session() as session:
        return await add_api_key(session, key_id=key_id, **values)


async def test_store_find_touch_and_revoke(database: Database) -> None:
    await configured(database)
    await add(database, "0123abcd", scopes=["workloads:read"])
    async with database.session() as session:
        found = await find_api_key(session, "0123abcd")
        assert found is not None
        key, principal = found
        assert (key.tenant, principal.name, key.roles, key.scopes) == (
            "alpha",
            "ci-bot",
            ["member"],
            ["workloads:read"],
        )
        await touch_api_key(session, "0123abcd", utcnow())
    async with database.session() as session:
        assert [k.key_id for k, _ in await list_api_keys(session, "alpha")] == ["0123abcd"]
        assert await list_api_keys(session, "beta") == []
        assert await list_api_keys(session, None) == []  # no platform keys
        with pytest.raises(NotFoundError):  # beta cannot revoke alpha's key
            await revoke_api_key(session, "beta", "0123abcd", actor="beta-admin")
        with pytest.raises(NotFoundError):  # nor is it a platform key
            await get_api_key(session, None, "0123abcd")
    async with database.session() as session:
        revoked = await revoke_api_key(session, "alpha", "0123abcd", actor="alpha-admin")
        assert revoked.revoked_at is not None
    async with database.session() as session:
        stored = await session.get(ApiKey, "0123abcd")
        assert stored is not None and stored.last_used_at is not None
        actions = (
            await session.exec(select(AuditEntry.action).where(AuditEntry.kind == "api_key"))
        ).all()
    assert sorted(actions) == ["create", "revoke"]


async def test_issuing_a_key_never_changes_another_key_of_the_same_principal(
    database: Database,
) -> None:
    """The old hole: roles lived on the principal, so each new key rewrote them for
    every older key of the same name."""
    await configured(database)
    await add(database, "aaaa01", roles=["member"])
    await add(database, "aaaa02", roles=["tenant-admin"])
    await add(database, "aaaa03", roles=["member"], scopes=["usage:read"])
    async with database.session() as session:
        roles = {k.key_id: (k.roles, k.scopes) for k, _ in await list_api_keys(session, "alpha")}
        principals = (await session.exec(select(func.count()).select_from(Principal))).one()
    assert roles == {
        "aaaa01": (["member"], MEMBER_SCOPES),
        "aaaa02": (["tenant-admin"], MEMBER_SCOPES),
        "aaaa03": (["member"], ["usage:read"]),
    }
    assert principals == 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"roles": ["root"]}, "unknown role 'root'"),
        ({"roles": []}, "name at least one role"),
        ({"roles": ["admin"]}, "a tenant's key cannot carry the platform role 'admin'"),
        ({"roles": ["member", "admin"]}, "ignara keys create --admin"),
        ({"scopes": []}, "an empty list would allow nothing"),
        ({"scopes": ["workloads"]}, "unknown scope 'workloads'"),
        ({"scopes": ["keys:write"]}, "do not allow scope 'keys:write'"),
        ({"tenant": None, "roles": ["member"]}, "a platform key carries exactly the admin role"),
        ({"tenant": None, "roles": ["admin"], "scopes": ["sudo"]}, "unknown scope 'sudo'"),
    ],
)
async def test_keys_no_one_may_hold_are_refused(
    database: Database, fields: dict[str, Any], message: str
) -> None:
    await configured(database)
    with pytest.raises(InvalidRequestError, match=message.replace("(", r"\(")):
        await add(database, "bad001", **fields)
    async with database.session() as session:
        assert (await session.exec(select(func.count()).select_from(ApiKey))).one() == 0


async def test_keys_of_unknown_tenants_are_refused(database: Database) -> None:
    await configured(database)
    with pytest.raises(NotFoundError):
        await add(database, "bad002", tenant="nope")


async def test_platform_keys_belong_to_no_tenant(database: Database) -> None:
    await configured(database)
    async with database.session() as session:
        assert not await has_platform_admin(session)
    await add(database, "f00001", tenant=None, principal="ops", roles=["admin"], scopes=["admin"])
    # The same name in a tenant is another principal, with keys of its own.
    await add(database, "f00002", tenant="alpha", principal="ops", roles=["member"])
    async with database.session() as session:
        platform = await list_api_keys(session, None)
        assert [(k.key_id, k.tenant, k.roles, p.tenant) for k, p in platform] == [
            ("f00001", None, ["admin"], None)
        ]
        assert await has_platform_admin(session)
        await revoke_api_key(session, None, "f00001", actor="root")
    async with database.session() as session:
        assert not await has_platform_admin(session)


@pytest.mark.parametrize("tenant", ["alpha", None], ids=["tenant", "platform"])
async def test_concurrent_keys_for_one_new_principal_all_succeed(
    database: Database, tenant: str | None
) -> None:
    """Requests racing to create the same principal: the database's unique constraint
    decides, and none of them fails."""
    await configured(database)
    roles = ["member"] if tenant else ["admin"]
    scopes = ["inference"] if tenant else ["admin"]
    made = await asyncio.gather(
        *(
            add(
                database,
                f"c0ffee{i:02d}",
                tenant=tenant,
                principal="racer",
                roles=roles,
                scopes=scopes,
            )
            for i in range(12)
        )
    )
    assert len(made) == 12
    async with database.session() as session:
        principals = (
            await session.exec(select(Principal).where(col(Principal.name) == "racer"))
        ).all()
        keys = (await session.exec(select(ApiKey))).all()
    assert len(principals) == 1
    assert {k.principal_id for k in keys} == {principals[0].id} and len(keys) == 12


async def test_a_disabled_principal_gets_no_key(database: Database) -> None:
    await configured(database)
    await add(database, "d00001")
    async with database.session() as session:
        principal = (await session.exec(select(Principal))).one()
        principal.disabled_at = utcnow()
        session.add(principal)
    with pytest.raises(ConflictError, match="disabled"):
        await add(database, "d00002")
