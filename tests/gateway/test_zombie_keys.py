"""Zombie keys over the admin API: each key listed with its recent use and its idle
and anomalous flags (why included), and the leader's round expiring the idle keys of a
tenant whose policy says so, after which the key is refused and its record says why."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from tenants.models import ApiKey, UsageRecordRow
from tenants.models._base import utcnow
from tests.gateway.access_harness import ADMIN_KEY, Api, config
from tests.support.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration


async def age(api: Api, key_id: str, days: int, *, used: bool = False) -> None:
    """Make ``key_id`` as if created ``days`` ago, and used just now or never since."""
    async with api.services.database.session() as session:
        key = await session.get(ApiKey, key_id)
        assert key is not None
        key.created_at = utcnow() - timedelta(days=days)
        key.last_used_at = utcnow() if used else None
        session.add(key)


async def spend(api: Api, key_id: str, days_ago: int, tokens: int) -> None:
    when = utcnow() - timedelta(days=days_ago)
    async with api.services.database.session() as session:
        session.add(
            UsageRecordRow(
                tenant="alpha",
                api_key_id=key_id,
                principal="p",
                queue="team-a",
                model="fake-model",
                flavor="llama",
                prompt_tokens=tokens,
                status=200,
                created_at=when,
                day=when.date(),
            )
        )


async def listed(api: Api, tenant: str) -> dict[str, Any]:
    got = await api.call(ADMIN_KEY, "GET", f"/api/v1/admin/tenants/{tenant}/keys")
    assert got.status_code == 200, got.text
    return {k["key_id"]: k for k in got.json()}


async def test_listings_show_recent_use_idle_and_anomalous_keys(api: Api) -> None:
    busy, idle, runaway = [
        (await api.key("alpha", name))["key_id"] for name in ("busy", "idle", "runaway")
    ]
    await age(api, idle, 45)
    for key_id in (busy, runaway):
        await age(api, key_id, 60, used=True)
        for days in range(1, 31):
            await spend(api, key_id, days, 2000)
    await spend(api, busy, 0, 3000)
    await spend(api, runaway, 0, 500_000)
    keys = await listed(api, "alpha")
    assert keys[busy]["activity"] == {
        "calls_7d": 7,
        "tokens_7d": 15_000,
        "calls_30d": 30,
        "tokens_30d": 61_000,
        "tokens_today": 3000,
        "idle": False,
        "idle_reason": None,
        "anomalous": False,
        "anomalous_reason": None,
    }
    assert keys[idle]["activity"]["idle"] is True
    assert "never used since it was created 45 days ago" in keys[idle]["activity"]["idle_reason"]
    assert "threshold is 30 days" in keys[idle]["activity"]["idle_reason"]
    assert keys[runaway]["activity"]["anomalous"] is True
    assert "500000 tokens today" in keys[runaway]["activity"]["anomalous_reason"]
    # A key in use is not idle: its last use is recorded when it authenticates.
    used = await api.key("alpha", "fresh")
    assert (await api.call(used["token"], "GET", "/api/v1/usage")).status_code == 200
    assert (await listed(api, "alpha"))[used["key_id"]]["activity"]["idle"] is False


async def test_the_leader_expires_idle_keys_of_tenants_whose_policy_says_so(
    api: Api, upstream: FakeOpenAI
) -> None:
    policy = config(upstream.base_url)
    policy["tenants"][0]["key_policy"] = {"expire_idle_keys": True, "idle_days": 7}
    applied = await api.call(ADMIN_KEY, "POST", "/api/v1/admin/config", policy)
    assert applied.status_code == 201, applied.text
    stale, kept, other = (
        await api.key("alpha", "stale"),
        await api.key("alpha", "kept"),
        await api.key("beta", "stale"),
    )
    await age(api, stale["key_id"], 8)
    await age(api, kept["key_id"], 6)
    await age(api, other["key_id"], 100)  # beta has no such policy
    assert (await listed(api, "alpha"))[stale["key_id"]]["activity"]["idle"] is True
    for _ in range(100):  # the admission loop takes leadership within a round or two
        if api.services.runtime is not None and api.services.runtime.lock.held:
            break
        await asyncio.sleep(0.1)
    await api.services.expire_idle_keys()
    keys = await listed(api, "alpha")
    assert keys[stale["key_id"]]["revoked_at"] is not None
    assert keys[stale["key_id"]]["revoked_reason"].startswith(
        "expired by tenant alpha's idle-key policy: never used since it was created 8 days ago"
    )
    assert keys[kept["key_id"]]["revoked_at"] is None
    assert (await listed(api, "beta"))[other["key_id"]]["revoked_at"] is None
    assert (await api.call(stale["token"], "GET", "/api/v1/usage")).status_code == 401
    assert (await api.call(kept["token"], "GET", "/api/v1/usage")).status_code == 200
