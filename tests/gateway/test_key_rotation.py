"""Rotating a key over the admin API: a new secret shown once, the old one kept for
the grace period the admin chose and refused after it, every rotation audited; who may
revoke a key may rotate it, and no one else."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlmodel import col, select

from tenants.models import ApiKey, AuditEntry
from tenants.models._base import utcnow
from tests.gateway.access_harness import ADMIN_KEY, Api

pytestmark = pytest.mark.integration


async def status(api: Api, token: str) -> int:
    return (await api.call(token, "GET", "/api/v1/usage")).status_code


async def rotate(api: Api, by: str, path: str, body: Any) -> Any:
    return await api.call(by, "POST", path, body)


async def test_the_old_secret_works_until_the_grace_ends(api: Api) -> None:
    made = await api.key("alpha", "ci")
    old, key_id = made["token"], made["key_id"]
    got = await rotate(
        api, ADMIN_KEY, f"/api/v1/admin/keys/{key_id}/rotate", {"grace_seconds": 3600}
    )
    assert got.status_code == 201, got.text
    body = got.json()
    new = body["token"]
    assert new.startswith(f"ign_live_{key_id}_") and new != old
    assert (body["key_id"], body["roles"], body["tenant"]) == (key_id, ["member"], "alpha")
    assert body["previous_valid_until"] is not None and body["rotated_at"] is not None
    assert (await status(api, new), await status(api, old)) == (200, 200)
    # The grace ends (moved into the past here, as time would): the old secret is refused.
    async with api.services.database.session() as session:
        key = await session.get(ApiKey, key_id)
        assert key is not None
        key.previous_valid_until = utcnow() - timedelta(seconds=1)
        session.add(key)
    api.services.api_keys.clear()
    assert (await status(api, new), await status(api, old)) == (200, 401)
    # Listings show the rotation, never a secret.
    listed = (await api.call(ADMIN_KEY, "GET", "/api/v1/admin/tenants/alpha/keys")).json()
    assert listed[0]["rotated_at"] is not None and listed[0]["token"] is None
    async with api.services.database.session() as session:
        audited = (
            await session.exec(
                select(AuditEntry).where(
                    col(AuditEntry.name) == key_id, col(AuditEntry.action) == "rotate"
                )
            )
        ).all()
    assert [(a.actor, a.detail["grace_seconds"]) for a in audited] == [("bootstrap-admin", 3600)]


async def test_without_grace_the_old_secret_is_refused_at_once(api: Api) -> None:
    made = await api.key("alpha", "ci")
    path = f"/api/v1/admin/keys/{made['key_id']}/rotate"
    first = (await rotate(api, ADMIN_KEY, path, {"grace_seconds": 600})).json()["token"]
    second = (await rotate(api, ADMIN_KEY, path, {"grace_seconds": 0})).json()
    assert second["previous_valid_until"] is None
    # At most two secrets are ever valid: a second rotation ends the first one's grace.
    assert await status(api, made["token"]) == 401
    assert await status(api, first) == 401
    assert await status(api, second["token"]) == 200


async def test_the_grace_is_bounded_and_dead_keys_are_not_rotated(api: Api) -> None:
    made = await api.key("alpha", "ci")
    path = f"/api/v1/admin/keys/{made['key_id']}/rotate"
    for body in ({"grace_seconds": -1}, {"grace_seconds": 8 * 86400}, {"grace": 5}):
        refused = await rotate(api, ADMIN_KEY, path, body)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == "invalid_request"
    assert (await rotate(api, ADMIN_KEY, path, {})).json()["previous_valid_until"]  # 1 h
    gone = await api.call(ADMIN_KEY, "DELETE", f"/api/v1/admin/tenants/alpha/keys/{made['key_id']}")
    assert gone.status_code == 200
    conflict = await rotate(api, ADMIN_KEY, path, {"grace_seconds": 60})
    assert conflict.status_code == 409, conflict.text
    assert "revoked" in conflict.json()["error"]["message"]
    missing = await rotate(api, ADMIN_KEY, "/api/v1/admin/keys/" + "f" * 12 + "/rotate", {})
    assert missing.status_code == 404


async def test_who_may_revoke_a_key_may_rotate_it(api: Api) -> None:
    boss = await api.token("alpha", "boss", roles=["tenant-admin"])
    member = await api.key("alpha", "ci")
    peer = await api.key("alpha", "peer", roles=["tenant-admin"])
    other = await api.key("beta", "ci")
    own = "/api/v1/admin/tenants/alpha/keys/{}/rotate"
    rotated = await rotate(api, boss, own.format(member["key_id"]), {"grace_seconds": 0})
    assert rotated.status_code == 201, rotated.text
    assert await status(api, rotated.json()["token"]) == 200
    # Not a peer's key, not another tenant's, not through the platform route.
    assert (await rotate(api, boss, own.format(peer["key_id"]), {})).status_code == 403
    beta = f"/api/v1/admin/tenants/beta/keys/{other['key_id']}/rotate"
    assert (await rotate(api, boss, beta, {})).status_code == 403
    assert (await rotate(api, boss, own.format(other["key_id"]), {})).status_code == 404
    platform = f"/api/v1/admin/keys/{member['key_id']}/rotate"
    assert (await rotate(api, boss, platform, {})).status_code == 403
    # A member rotates nothing, not even its own key.
    mine = own.format(member["key_id"])
    assert (await rotate(api, rotated.json()["token"], mine, {})).status_code == 403
    assert await status(api, other["token"]) == 200  # untouched
