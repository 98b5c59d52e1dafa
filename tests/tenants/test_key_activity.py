"""Zombie keys: each key's calls and tokens over 7 and 30 days from usage records
written directly, idle keys flagged (by the gateway's threshold or the tenant's), idle
keys expired where the tenant's policy says so, and runaway keys flagged anomalous."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlmodel import col, select

from tenants import Database, parse_config
from tenants.models import ApiKey, AuditEntry, UsageRecordRow
from tenants.models._base import utcnow
from tenants.services import apply_config, export_config
from tenants.services.api_keys import add_api_key
from tenants.services.key_activity import (
    KeyActivity,
    expire_idle_keys,
    key_activity,
    key_flags,
)

CONFIG: dict[str, Any] = {
    "tenants": [
        {"name": "alpha", "key_policy": {"expire_idle_keys": True, "idle_days": 10}},
        {"name": "beta"},
    ]
}
NOW = utcnow()


async def setup(database: Database, config: dict[str, Any] = CONFIG) -> None:
    async with database.session() as session:
        await apply_config(session, parse_config(config), actor="test")


async def key(
    database: Database,
    key_id: str,
    tenant: str | None = "alpha",
    *,
    created: datetime = NOW,
    used: datetime | None = None,
) -> None:
    async with database.session() as session:
        made = await add_api_key(
            session,
            tenant=tenant,
            principal=f"p-{key_id}",
            roles=["admin"] if tenant is None else ["member"],
            scopes=None,
            key_id=key_id,
            secret_hash="f" * 64,
            actor="test",
        )
        made.created_at, made.last_used_at = created, used
        session.add(made)


async def calls(database: Database, key_id: str, when: datetime, *tokens: int) -> None:
    """One usage record per entry of ``tokens`` (split into prompt and completion)."""
    async with database.session() as session:
        for n in tokens:
            session.add(
                UsageRecordRow(
                    tenant="alpha",
                    api_key_id=key_id,
                    principal="p",
                    queue="q",
                    model="m",
                    flavor="f",
                    prompt_tokens=n // 2,
                    completion_tokens=n - n // 2,
                    status=200,
                    created_at=when,
                    day=when.date(),
                )
            )


async def test_each_key_counts_its_calls_and_tokens_over_7_and_30_days(
    database: Database,
) -> None:
    await setup(database)
    await key(database, "k1", created=NOW - timedelta(days=60))
    await key(database, "k2")
    await calls(database, "k1", NOW, 100, 101)
    await calls(database, "k1", NOW - timedelta(days=6), 50)
    await calls(database, "k1", NOW - timedelta(days=7), 7)  # 30 days, not 7
    await calls(database, "k1", NOW - timedelta(days=29), 1000)
    await calls(database, "k1", NOW - timedelta(days=31), 9999)  # neither
    await calls(database, "other", NOW, 5)
    async with database.session() as session:
        found = await key_activity(session, ["k1", "k2"], NOW.date())
    assert set(found) == {"k1"}  # no usage: no row, read as all zero
    assert found["k1"] == KeyActivity(
        calls_7d=3,
        tokens_7d=251,
        calls_30d=5,
        tokens_30d=1258,
        tokens_today=201,
        tokens_before_today=1057,
    )


def test_keys_idle_past_the_threshold_are_flagged_with_why() -> None:
    old, used = NOW - timedelta(days=40), NOW - timedelta(days=12)
    never = ApiKey(key_id="a", principal_id="p", secret_hash="", created_at=old)
    recent = ApiKey(key_id="b", principal_id="p", secret_hash="", created_at=old, last_used_at=used)
    new = ApiKey(key_id="c", principal_id="p", secret_hash="", created_at=NOW)
    quiet = KeyActivity()
    flags = key_flags(never, quiet, NOW, idle_days=30, factor=10, floor=1)
    assert flags.idle and flags.idle_reason is not None
    assert "never used" in flags.idle_reason and "40 days" in flags.idle_reason
    assert not key_flags(recent, quiet, NOW, idle_days=30, factor=10, floor=1).idle
    by_tenant = key_flags(recent, quiet, NOW, idle_days=10, factor=10, floor=1)
    assert by_tenant.idle and "idle 12 days, the threshold is 10 days" in str(by_tenant.idle_reason)
    assert not key_flags(new, quiet, NOW, idle_days=1, factor=10, floor=1).idle
    never.revoked_at = NOW
    assert not key_flags(never, quiet, NOW, idle_days=30, factor=10, floor=1).idle


async def test_a_key_spending_far_above_its_history_is_anomalous(database: Database) -> None:
    await setup(database)
    old = NOW - timedelta(days=90)
    for key_id in ("steady", "runaway", "young", "small"):
        await key(database, key_id, created=old if key_id != "young" else NOW - timedelta(days=2))
    for days in range(1, 31):
        for key_id in ("steady", "runaway"):
            await calls(database, key_id, NOW - timedelta(days=days), 1000)
    await calls(database, "steady", NOW, 9000)  # 9x its mean of 1000: not yet
    await calls(database, "runaway", NOW, 11_000)  # 11x
    await calls(database, "young", NOW - timedelta(days=1), 3000)
    await calls(database, "young", NOW, 40_000)  # 40000 > 10 x (3000 / 2 days)
    await calls(database, "small", NOW, 9_999)  # no history, but below the floor
    async with database.session() as session:
        found = await key_activity(session, ["steady", "runaway", "young", "small"], NOW.date())
        keys = {k.key_id: k for k in (await session.exec(select(ApiKey))).all()}
    flags = {
        key_id: key_flags(keys[key_id], found[key_id], NOW, idle_days=30, factor=10, floor=10_000)
        for key_id in found
    }
    assert {k for k, f in flags.items() if f.anomalous} == {"runaway", "young"}
    assert flags["runaway"].anomalous_reason == (
        "11000 tokens today, more than 10 times its daily mean of 1000 over the 30 days before"
    )


async def test_the_tenants_policy_expires_its_idle_keys(database: Database) -> None:
    await setup(database)
    long_ago = NOW - timedelta(days=40)
    await key(database, "stale", created=long_ago, used=NOW - timedelta(days=11))
    await key(database, "fresh", created=long_ago, used=NOW - timedelta(days=9))
    await key(database, "unused", created=long_ago)
    await key(database, "beta-stale", "beta", created=long_ago)  # no policy
    await key(database, "platform", None, created=long_ago)  # never expired so
    async with database.session() as session:
        expired = await expire_idle_keys(session, NOW, default_idle_days=30, actor="policy")
    assert sorted(k.key_id for k in expired) == ["stale", "unused"]
    async with database.session() as session:
        keys = {k.key_id: k for k in (await session.exec(select(ApiKey))).all()}
        audit = (
            await session.exec(select(AuditEntry).where(col(AuditEntry.action) == "expire"))
        ).all()
        exported = await export_config(session)
    assert {k for k, v in keys.items() if v.revoked_at is not None} == {"stale", "unused"}
    assert str(keys["stale"].revoked_reason).startswith(
        "expired by tenant alpha's idle-key policy: last used"
    )
    assert "idle 11 days, the threshold is 10 days" in str(keys["stale"].revoked_reason)
    assert sorted((a.name, a.actor, a.detail["reason"][:7]) for a in audit) == [
        ("stale", "policy", "expired"),
        ("unused", "policy", "expired"),
    ]
    # A second round finds nothing more; the policy reads back as written.
    async with database.session() as session:
        assert await expire_idle_keys(session, NOW, default_idle_days=30, actor="policy") == []
    alpha = next(t for t in exported["tenants"] if t["name"] == "alpha")
    assert alpha["key_policy"] == {"expire_idle_keys": True, "idle_days": 10}
