"""One workload of any tenant for a platform admin: ``GET`` and ``DELETE``
``/api/v1/admin/workloads/{id}`` (its events and why it waits; its cancellation, audited
under its tenant with the admin as actor); tenant keys are refused (403)."""

from __future__ import annotations

from typing import Any

from litestar.testing import TestClient

from tests.admin.test_queue_preview import ADMIN, bearer, client, gang, key, submit

__all__ = ["client"]

MISSING = "0" * 32


def test_a_platform_admin_reads_and_cancels_any_tenants_workload(
    client: TestClient[Any],
) -> None:
    beta = key(client, "beta")
    waiting = submit(client, beta, gang("b-big", "team-b", 10))

    read = client.get(f"/api/v1/admin/workloads/{waiting}", headers=ADMIN)
    assert read.status_code == 200, read.text
    body = read.json()
    assert body["tenant"] == "beta" and body["state"] == "pending"
    assert [e["type"] for e in body["events"]] == ["submitted"] and body["event_count"] == 1
    assert client.get(f"/api/v1/admin/workloads/{MISSING}", headers=ADMIN).status_code == 404
    assert client.get("/api/v1/admin/workloads/not-an-id", headers=ADMIN).status_code == 400

    # neither a tenant admin (even of the workload's tenant) nor a member may
    for token in (key(client, "beta", "tenant-admin"), beta, key(client, "alpha", "tenant-admin")):
        assert (
            client.delete(f"/api/v1/admin/workloads/{waiting}", headers=bearer(token)).status_code
            == 403
        )
        assert (
            client.get(f"/api/v1/admin/workloads/{waiting}", headers=bearer(token)).status_code
            == 403
        )
    assert client.get(f"/api/v1/workloads/{waiting}", headers=bearer(beta)).json()["state"] == (
        "pending"
    )

    cancelled = client.delete(f"/api/v1/admin/workloads/{waiting}", headers=ADMIN)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled"
    owner_view = client.get(f"/api/v1/workloads/{waiting}", headers=bearer(beta)).json()
    assert owner_view["state"] == "cancelled" and owner_view["events"][-1]["type"] == "cancelled"
    assert client.delete(f"/api/v1/admin/workloads/{MISSING}", headers=ADMIN).status_code == 404

    audit = client.get(
        "/api/v1/admin/audit",
        params={"kind": "workload", "name": waiting, "action": "cancel"},
        headers=ADMIN,
    ).json()["items"]
    assert [(e["action"], e["tenant"], e["actor"]) for e in audit] == [
        ("cancel", "beta", "bootstrap-admin")
    ]
