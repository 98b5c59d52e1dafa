"""Migration 0008 on SQLite and PostgreSQL: roles move from principals onto keys as
each key was issued, a tenant's admin key becomes a platform key, scopes become
explicit; and back down to 0007."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlmodel import col, select

from tenants import Database, async_url, migrate
from tenants.models import ApiKey, AuditEntry, Principal, Tenant
from tests.support.postgres import create_database

MEMBER = ["inference", "usage:read", "workloads:read", "workloads:write"]
NOW = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'legacy.db'}"
    return await create_database(request.getfixturevalue("postgres"))


async def execute(url: str, *statements: tuple[str, dict[str, Any]]) -> None:
    engine = create_async_engine(async_url(url))
    try:
        async with engine.begin() as connection:
            for sql, values in statements:
                await connection.execute(text(sql), values)
    finally:
        await engine.dispose()


def principal(pid: str, name: str, roles: list[str]) -> tuple[str, dict[str, Any]]:
    return (
        "INSERT INTO principals (id, tenant, name, kind, roles, created_at)"
        " VALUES (:id, 'alpha', :name, 'service-account', :roles, :at)",
        {"id": pid, "name": name, "roles": json.dumps(roles), "at": NOW},
    )


def key(key_id: str, pid: str, scopes: list[str]) -> tuple[str, dict[str, Any]]:
    return (
        "INSERT INTO api_keys (key_id, tenant, principal_id, secret_hash, scopes, created_at)"
        " VALUES (:id, 'alpha', :pid, 'h', :scopes, :at)",
        {"id": key_id, "pid": pid, "scopes": json.dumps(scopes), "at": NOW},
    )


def issued(key_id: str, roles: list[str]) -> tuple[str, dict[str, Any]]:
    return (
        "INSERT INTO audit_log (at, actor, action, kind, name, tenant, detail)"
        " VALUES (:at, 'root', 'create', 'api_key', :id, 'alpha', :detail)",
        {"at": NOW, "id": key_id, "detail": json.dumps({"roles": roles})},
    )


async def test_roles_move_onto_keys_as_issued(url: str) -> None:
    await asyncio.to_thread(migrate, url, "0007")
    await execute(
        url,
        (
            "INSERT INTO tenants (name, display_name, queues, limits, created_at, updated_at)"
            " VALUES ('alpha', '', '[]', '{}', :at, :at)",
            {"at": NOW},
        ),
        # "bot" got a member key, then a tenant-admin key that promoted the first one.
        principal("p1", "bot", ["tenant-admin"]),
        key("k1", "p1", []),
        issued("k1", ["member"]),
        key("k2", "p1", []),
        issued("k2", ["tenant-admin"]),
        # An admin made on a tenant's key, before platform keys existed.
        principal("p2", "ops", ["admin"]),
        key("k3", "p2", []),
        # Scopes stored but never enforced: the known ones are kept.
        principal("p3", "reader", ["member"]),
        key("k4", "p3", ["usage:read", "bogus"]),
    )
    await asyncio.to_thread(migrate, url)
    database = Database(url)
    try:
        async with database.session() as session:
            keys = {k.key_id: k for k in (await session.exec(select(ApiKey))).all()}
            principals = {p.id: p for p in (await session.exec(select(Principal))).all()}
            migrated = (
                await session.exec(
                    select(AuditEntry.name).where(col(AuditEntry.actor) == "migration 0008")
                )
            ).all()
            connection = await session.connection()
            columns = await connection.run_sync(
                lambda sync: [c["name"] for c in inspect(sync).get_columns("principals")]
            )
    finally:
        await database.dispose()
    assert (keys["k1"].roles, keys["k1"].scopes) == (["member"], MEMBER)
    assert (keys["k2"].roles, keys["k2"].scopes) == (
        ["tenant-admin"],
        sorted([*MEMBER, "keys:read", "keys:write"]),
    )
    ops = keys["k3"]
    assert (ops.tenant, ops.roles, "admin" in ops.scopes) == (None, ["admin"], True)
    assert (principals[ops.principal_id].tenant, principals[ops.principal_id].name) == (None, "ops")
    assert (keys["k4"].roles, keys["k4"].scopes) == (["member"], ["usage:read"])
    assert sorted(migrated) == ["k1", "k3"]  # whose powers changed
    assert "roles" not in columns


async def test_down_to_0007_and_up_again(url: str) -> None:
    await asyncio.to_thread(migrate, url)
    database = Database(url)
    try:
        async with database.session() as session:
            session.add(Tenant(name="alpha"))
            await session.flush()
            session.add(Principal(id="p1", tenant="alpha", name="bot"))
            session.add(Principal(id="p2", tenant=None, name="ops"))
            await session.flush()
            session.add(
                ApiKey(
                    key_id="k1",
                    tenant="alpha",
                    principal_id="p1",
                    secret_hash="h",
                    roles=["tenant-admin"],
                    scopes=["inference"],
                )
            )
            session.add(
                ApiKey(
                    key_id="k2",
                    tenant=None,
                    principal_id="p2",
                    secret_hash="h",
                    roles=["admin"],
                    scopes=["admin"],
                )
            )
    finally:
        await database.dispose()
    from alembic import command

    from tenants.db import alembic_config

    with pytest.raises(RuntimeError, match="1 platform keys exist"):
        await asyncio.to_thread(command.downgrade, alembic_config(url), "0007")
    await execute(
        url,
        ("DELETE FROM api_keys WHERE key_id = 'k2'", {}),
        ("DELETE FROM principals WHERE id = 'p2'", {}),
    )
    await asyncio.to_thread(command.downgrade, alembic_config(url), "0007")
    engine = create_async_engine(async_url(url))
    try:
        async with engine.connect() as connection:
            roles = (
                await connection.execute(text("SELECT roles FROM principals WHERE id = 'p1'"))
            ).scalar_one()
    finally:
        await engine.dispose()
    assert (json.loads(roles) if isinstance(roles, str) else roles) == ["tenant-admin"]
    await asyncio.to_thread(migrate, url)
