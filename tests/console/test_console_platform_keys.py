"""The platform's keys in the console (``/console/keys``): a platform admin lists them,
creates one (its token shown once, an admin's), sets its limits, rotates and revokes it;
a tenant admin can neither see the page nor mint a platform key through the console."""

from __future__ import annotations

from typing import Any

from litestar.testing import TestClient

from tests.conftest import ADMIN_KEY
from tests.console.test_console_http import csrf_of, sign_in
from tests.console.test_console_keys import client, new_token
from tests.gateway.test_workload_api import bearer

__all__ = ["client"]  # the keys tests' fixture: a gateway with their config applied


def test_a_platform_admin_makes_limits_rotates_and_revokes_a_platform_key(
    client: TestClient[Any],
) -> None:
    sign_in(client, ADMIN_KEY)
    dashboard = client.get("/console/dashboard").text
    assert 'href="/console/keys"' in dashboard  # in the navigation
    page = client.get("/console/keys")
    assert page.status_code == 200 and 'data-testid="keys"' in page.text
    assert 'name="role"' not in page.text  # a platform key is an admin's: no role to pick

    created = client.post(
        "/console/keys",
        data={"csrf": csrf_of(page.text), "principal": "ops-bot", "tokens_per_minute": "5000"},
    )
    assert created.status_code == 200, created.text
    token = new_token(created.text)
    key_id = token.split("_")[2]
    # An admin's key: it reads what only platform admins read; it has no tenant.
    listed = client.get("/api/v1/admin/keys", headers=bearer(token))
    assert listed.status_code == 200, listed.text
    mine = next(k for k in listed.json() if k["key_id"] == key_id)
    assert mine["tenant"] is None and mine["roles"] == ["admin"]
    assert mine["limits"] == {"tokens-per-minute": 5000}
    shown = client.get("/console/keys").text
    assert f"<code>{key_id}</code>" in shown and "ops-bot" in shown
    assert token not in shown  # shown once, at creation

    csrf = csrf_of(shown)
    lifted = client.post(
        f"/console/keys/{key_id}/limits",
        data={"csrf": csrf, "tokens_per_minute": "", "tokens_per_day": "100000"},
    )
    assert lifted.status_code == 200 and 'data-testid="saved"' in lifted.text, lifted.text
    rotated = client.post(
        f"/console/keys/{key_id}/rotate", data={"csrf": csrf, "grace_seconds": "0"}
    )
    assert rotated.status_code == 200, rotated.text
    newer = new_token(rotated.text)
    assert client.get("/api/v1/admin/keys", headers=bearer(token)).status_code == 401
    assert client.get("/api/v1/admin/keys", headers=bearer(newer)).status_code == 200
    revoked = client.post(f"/console/keys/{key_id}/revoke", data={"csrf": csrf})
    assert revoked.status_code == 200, revoked.text
    assert client.get("/api/v1/admin/keys", headers=bearer(newer)).status_code == 401
    after = client.get("/api/v1/admin/keys", headers=bearer(ADMIN_KEY)).json()
    assert next(k for k in after if k["key_id"] == key_id)["limits"] == {"tokens-per-day": 100000}


def test_a_tenant_admin_cannot_see_or_mint_platform_keys(client: TestClient[Any]) -> None:
    made = client.post(
        "/api/v1/admin/tenants/alpha/keys",
        json={"principal": "alice", "roles": ["tenant-admin"]},
        headers=bearer(ADMIN_KEY),
    )
    assert made.status_code == 201, made.text
    sign_in(client, made.json()["token"])
    own = client.get("/console/tenants/alpha").text
    assert 'href="/console/keys"' not in own
    csrf = csrf_of(own)
    assert client.get("/console/keys").status_code == 403
    minted = client.post("/console/keys", data={"csrf": csrf, "principal": "sneaky"})
    assert minted.status_code == 403
    platform = client.get("/api/v1/admin/keys", headers=bearer(ADMIN_KEY)).json()
    assert all(k["principal"] != "sneaky" for k in platform)
    # Nor revoke or rotate a platform key through the platform's routes.
    ops = client.post("/api/v1/admin/keys", json={"principal": "ops"}, headers=bearer(ADMIN_KEY))
    assert ops.status_code == 201, ops.text
    key_id = ops.json()["key_id"]
    revoke = client.post(f"/console/keys/{key_id}/revoke", data={"csrf": csrf})
    rotate = client.post(
        f"/console/keys/{key_id}/rotate", data={"csrf": csrf, "grace_seconds": "0"}
    )
    # Nor lift its limits (a key climbing out of its allowance through another's page).
    limits = client.post(
        f"/console/keys/{key_id}/limits", data={"csrf": csrf, "tokens_per_minute": "999999"}
    )
    assert (revoke.status_code, rotate.status_code, limits.status_code) == (403, 403, 403)
    assert client.get("/api/v1/admin/keys", headers=bearer(ops.json()["token"])).status_code == 200
    listed = client.get("/api/v1/admin/keys", headers=bearer(ADMIN_KEY)).json()
    assert next(k for k in listed if k["key_id"] == key_id).get("limits") in (None, {})
