"""Deleting a tenant (by the API or by leaving it out of the config) revokes its keys,
disables its principals and cancels its pending work, keeps its history, and is
refused while it holds admitted work; a queue taken from a tenant closes to it."""

from __future__ import annotations

from typing import Any

import pytest
from sqlmodel import col, select

from tenants import ConflictError, Database, NotFoundError, parse_config
from tenants.models import ApiKey, AuditEntry, Principal, Tenant, WorkloadRow
from tenants.services import apply_config, delete_tenant, export_config, live_tenants
from tenants.services.api_keys import add_api_key
from tenants.services.tenants import QUEUE_CLOSED

QUEUE = {
    "resource_groups": [
        {
            "resources": ["nvidia.com/gpu"],
            "flavors": [{"name": "h100", "quotas": {"nvidia.com/gpu": {"nominal": 4}}}],
        }
    ]
}


def config(*tenants: dict[str, Any]) -> dict[str, Any]:
    return {
        "flavors": ["h100"],
        "cluster_queues": [{"name": q, **QUEUE} for q in ("qa", "qb")],
        "tenants": list(tenants),
    }


ALPHA = {"name": "alpha", "queues": ["qa"]}
BETA = {"name": "beta", "queues": ["qb"]}


async def apply(database: Database, data: dict[str, Any]) -> list[str]:
    async with database.session() as session:
        report = await apply_config(session, parse_config(data), actor="test")
    return report.deleted


async def key(database: Database, key_id: str, tenant: str = "alpha") -> None:
    async with database.session() as session:
        await add_api_key(
            session,
            tenant=tenant,
            principal="bot",
            roles=["member"],
            scopes=["inference"],
            key_id=key_id,
            secret_hash="0" * 64,
            actor="test",
        )


async def workload(database: Database, name: str, state: str, tenant: str = "alpha") -> str:
    row = WorkloadRow(tenant=tenant, name=name, queue="qa", state=state)
    async with database.session() as session:
        session.add(row)
    return row.id


async def test_deleting_a_tenant_revokes_disables_cancels_and_keeps_history(
    database: Database,
) -> None:
    await apply(database, config(ALPHA, BETA))
    await key(database, "a00001")
    await key(database, "b00001", tenant="beta")
    pending = await workload(database, "waits", "pending")
    done = await workload(database, "done", "succeeded")
    async with database.session() as session:
        removal = await delete_tenant(session, "alpha", actor="root")
    assert (removal.keys_revoked, removal.principals_disabled, removal.workloads_cancelled) == (
        1,
        1,
        1,
    )
    async with database.session() as session:
        alpha = await session.get(Tenant, "alpha")
        keys = {k.key_id: k for k in (await session.exec(select(ApiKey))).all()}
        principals = {p.tenant: p for p in (await session.exec(select(Principal))).all()}
        waits = await session.get(WorkloadRow, pending)
        finished = await session.get(WorkloadRow, done)
        audit = (
            await session.exec(select(AuditEntry).where(col(AuditEntry.actor) == "root"))
        ).all()
        live = [t.name for t in await live_tenants(session)]
        exported = [t["name"] for t in (await export_config(session))["tenants"]]
    assert alpha is not None and alpha.deleted_at is not None  # the row stays, for history
    assert keys["a00001"].revoked_at is not None and keys["b00001"].revoked_at is None
    assert principals["alpha"].disabled_at is not None
    assert principals["beta"].disabled_at is None
    assert waits is not None and (waits.state, waits.reason_code) == ("cancelled", "Cancelled")
    assert "was deleted" in (waits.reason_message or "")
    assert finished is not None and finished.state == "succeeded"
    assert sorted((e.kind, e.action) for e in audit) == [
        ("api_key", "revoke"),
        ("tenant", "delete"),
        ("workload", "cancel"),
    ]
    assert live == exported == ["beta"]
    with pytest.raises(NotFoundError):  # once
        async with database.session() as session:
            await delete_tenant(session, "alpha", actor="root")
    with pytest.raises(NotFoundError):  # and no key is issued under it any more
        await key(database, "a00002")


@pytest.mark.parametrize("state", ["admitted", "running"])
async def test_a_tenant_with_admitted_work_is_not_deleted(database: Database, state: str) -> None:
    await apply(database, config(ALPHA))
    await key(database, "a00001")
    pending = await workload(database, "waits", "pending")
    await workload(database, "busy-job", state)
    with pytest.raises(
        ConflictError, match=r"'alpha' has admitted or running workloads \(busy-job"
    ):
        async with database.session() as session:
            await delete_tenant(session, "alpha", actor="root")
    with pytest.raises(ConflictError, match="busy-job"):  # nor by leaving it out of the file
        await apply(database, config())
    async with database.session() as session:  # nothing half-done
        alpha = await session.get(Tenant, "alpha")
        stored = await session.get(ApiKey, "a00001")
        waits = await session.get(WorkloadRow, pending)
    assert alpha is not None and alpha.deleted_at is None
    assert stored is not None and stored.revoked_at is None
    assert waits is not None and waits.state == "pending"


async def test_the_config_deletes_tenants_it_leaves_out_and_restores_them(
    database: Database,
) -> None:
    await apply(database, config(ALPHA, BETA))
    await key(database, "a00001")
    assert await apply(database, config(BETA)) == ["tenant alpha"]
    assert await apply(database, config(BETA)) == []  # once
    async with database.session() as session:
        report = await apply_config(session, parse_config(config(ALPHA, BETA)), actor="test")
    assert report.created == ["tenant alpha"]
    await key(database, "a00002")  # its principal may hold keys again
    async with database.session() as session:
        old = await session.get(ApiKey, "a00001")
        new = await session.get(ApiKey, "a00002")
        alpha = await session.get(Tenant, "alpha")
    assert old is not None and old.revoked_at is not None  # the old ones stay revoked
    assert new is not None and new.revoked_at is None
    assert alpha is not None and alpha.deleted_at is None


async def test_a_queue_taken_from_a_tenant_closes_its_pending_work_there(
    database: Database,
) -> None:
    await apply(database, config(ALPHA, BETA))
    waits = await workload(database, "waits", "pending")
    async with database.session() as session:
        before = await session.get(WorkloadRow, waits)
    assert before is not None
    await apply(
        database, config({"name": "alpha", "queues": []}, {"name": "beta", "queues": ["qb", "qa"]})
    )
    async with database.session() as session:
        after = await session.get(WorkloadRow, waits)
    assert after is not None and after.state == "pending"
    assert after.reason_code == QUEUE_CLOSED
    assert after.version == before.version + 1  # an admission pass that read it loses
