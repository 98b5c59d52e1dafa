"""API keys in SQL: stored as hashes, found with their principal, revoked per tenant."""

from __future__ import annotations

import pytest
from sqlmodel import select

from tenants import Database, NotFoundError, parse_config
from tenants.models import ApiKey, AuditEntry
from tenants.models._base import utcnow
from tenants.services import apply_config
from tenants.services.api_keys import (
    add_api_key,
    find_api_key,
    list_api_keys,
    revoke_api_key,
    touch_api_key,
)

CONFIG = {"tenants": [{"name": "alpha"}, {"name": "beta"}]}


async def test_store_find_touch_and_revoke(database: Database) -> None:
    async with database.session() as session:
        await apply_config(session, parse_config(CONFIG), actor="test")
        await add_api_key(
            session,
            tenant="alpha",
            principal="ci-bot",
            roles=["member"],
            key_id="0123abcd",
            secret_hash="f" * 64,
            scopes=["workloads"],
            actor="admin",
        )
    async with database.session() as session:
        found = await find_api_key(session, "0123abcd")
        assert found is not None
        key, principal = found
        assert (key.tenant, principal.name, principal.roles) == ("alpha", "ci-bot", ["member"])
        await touch_api_key(session, "0123abcd", utcnow())
    async with database.session() as session:
        assert [k.key_id for k in await list_api_keys(session, "alpha")] == ["0123abcd"]
        assert await list_api_keys(session, "beta") == []
        with pytest.raises(NotFoundError):  # beta cannot revoke alpha's key
            await revoke_api_key(session, "beta", "0123abcd", actor="beta-admin")
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


async def test_unknown_roles_and_tenants_are_refused(database: Database) -> None:
    async with database.session() as session:
        await apply_config(session, parse_config(CONFIG), actor="test")
        with pytest.raises(ValueError, match="unknown role 'root'"):
            await add_api_key(
                session,
                tenant="alpha",
                principal="x",
                roles=["root"],
                key_id="1",
                secret_hash="0",
                actor="t",
            )
        with pytest.raises(NotFoundError):
            await add_api_key(
                session,
                tenant="nope",
                principal="x",
                roles=["member"],
                key_id="2",
                secret_hash="0",
                actor="t",
            )
