"""The per-object admin API over HTTP: every object's create, read, list, update and
delete; versions and If-Match (412, 428); dependent deletes (409); quota checks (422);
the audit log; who may do what; bad input."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import Settings
from tests.conftest import ADMIN_KEY
from tests.gateway.test_workload_api import CONFIG, bearer, key_for, workload

ADMIN = bearer(ADMIN_KEY)
API = "/api/v1/admin"


def queue(name: str, gpus: int = 4, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "resource_groups": [
            {
                "resources": ["nvidia.com/gpu"],
                "flavors": [{"name": "h100", "quotas": {"nvidia.com/gpu": {"nominal": gpus}}}],
            }
        ],
        **extra,
    }


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient[Any]]:
    with TestClient(app=create_app(settings)) as client:
        assert client.post(f"{API}/config", json=CONFIG, headers=ADMIN).status_code == 201
        yield client


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = response.json()["error"]
    assert body["message"]
    return body


def test_a_cluster_queue_is_created_read_listed_updated_and_deleted(
    client: TestClient[Any],
) -> None:
    spec = queue(
        "team-c",
        cohort=None,
        queueing_strategy="StrictFIFO",
        preemption={"within_cluster_queue": "LowerPriority"},
        default_max_runtime="2h",
    )
    spec.pop("cohort")
    created = client.post(f"{API}/config/cluster-queues", json=spec, headers=ADMIN)
    assert created.status_code == 201, created.text
    assert created.headers["etag"] == '"1"'
    body = created.json()
    assert (body["kind"], body["name"], body["version"]) == ("cluster_queue", "team-c", 1)
    assert body["spec"]["queueing_strategy"] == "StrictFIFO"

    got = client.get(f"{API}/config/cluster-queues/team-c", headers=ADMIN)
    assert got.status_code == 200 and got.json() == body

    names = [
        q["name"] for q in client.get(f"{API}/config/cluster-queues", headers=ADMIN).json()["items"]
    ]
    assert names == ["team-a", "team-b", "team-c"]

    changed = client.put(
        f"{API}/config/cluster-queues/team-c",
        json=queue("team-c", gpus=8),
        headers={**ADMIN, "If-Match": created.headers["etag"]},
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["version"] == 2 and changed.headers["etag"] == '"2"'
    quotas = changed.json()["spec"]["resource_groups"][0]["flavors"][0]["quotas"]
    assert quotas["nvidia.com/gpu"]["nominal"] == 8
    # The declarative config reads what the API wrote.
    config = client.get(f"{API}/config", headers=ADMIN).json()
    assert [q["name"] for q in config["cluster_queues"]] == ["team-a", "team-b", "team-c"]

    gone = client.delete(
        f"{API}/config/cluster-queues/team-c", headers={**ADMIN, "If-Match": '"2"'}
    )
    assert gone.status_code == 200, gone.text
    error_of(client.get(f"{API}/config/cluster-queues/team-c", headers=ADMIN), 404)


def test_flavors_cohorts_and_backends_have_the_same_crud(client: TestClient[Any]) -> None:
    for path, spec in (
        ("flavors", {"name": "a100"}),
        ("cohorts", {"name": "research"}),
        ("backends", {"name": "ray-east", "kind": "ray", "url": "http://127.0.0.1:8265"}),
    ):
        created = client.post(f"{API}/config/{path}", json=spec, headers=ADMIN)
        assert created.status_code == 201, (path, created.text)
        name = spec["name"]
        got = client.get(f"{API}/config/{path}/{name}", headers=ADMIN)
        assert got.status_code == 200 and got.json()["name"] == name
        etag = got.headers["etag"]
        error_of(client.post(f"{API}/config/{path}", json=spec, headers=ADMIN), 409)
        assert client.delete(f"{API}/config/{path}/{name}", headers=ADMIN).status_code == 200
        error_of(client.get(f"{API}/config/{path}/{name}", headers=ADMIN), 404)
        assert etag.startswith('"')
    # A flavor that names its backend; then changed to run locally.
    client.post(f"{API}/config/backends", json={"name": "local", "kind": "local"}, headers=ADMIN)
    made = client.post(
        f"{API}/config/flavors", json={"name": "a100", "backend": "local"}, headers=ADMIN
    )
    assert made.status_code == 201, made.text
    assert made.json()["spec"] == {"name": "a100", "backend": "local"}
    moved = client.put(
        f"{API}/config/flavors/a100", json={}, headers={**ADMIN, "If-Match": made.headers["etag"]}
    )
    assert moved.status_code == 200, moved.text
    assert moved.json()["spec"] == {"name": "a100"} and moved.json()["version"] == 2


def test_a_tenant_is_created_read_updated_and_deleted(client: TestClient[Any]) -> None:
    created = client.post(
        f"{API}/tenants",
        json={"name": "gamma", "queues": ["team-a"], "display_name": "Gamma"},
        headers=ADMIN,
    )
    assert created.status_code == 201, created.text
    assert created.json()["spec"]["display_name"] == "Gamma"
    changed = client.put(
        f"{API}/tenants/gamma",
        json={"queues": ["team-a", "team-b"], "limits": {"max_pods_per_workload": 4}},
        headers={**ADMIN, "If-Match": created.headers["etag"]},
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["spec"]["queues"] == ["team-a", "team-b"]
    assert changed.json()["version"] == created.json()["version"] + 1
    listed = client.get(f"{API}/tenants", headers=ADMIN).json()["items"]
    assert "gamma" in [t["name"] for t in listed]
    gone = client.delete(
        f"{API}/tenants/gamma", headers={**ADMIN, "If-Match": changed.headers["etag"]}
    )
    assert gone.status_code == 200, gone.text
    error_of(client.get(f"{API}/tenants/gamma", headers=ADMIN), 404)


def test_principals_are_created_read_updated_and_deleted_with_their_keys_roles(
    client: TestClient[Any],
) -> None:
    base = f"{API}/tenants/alpha/principals"
    created = client.post(base, json={"name": "robot", "kind": "service-account"}, headers=ADMIN)
    assert created.status_code == 201, created.text
    assert created.json()["roles"] == [] and created.json()["live_keys"] == 0
    error_of(client.post(base, json={"name": "robot"}, headers=ADMIN), 409)

    key_for(client, "alpha", ["tenant-admin"])  # principal alpha-bot
    bot = client.get(f"{base}/alpha-bot", headers=ADMIN)
    assert bot.status_code == 200 and bot.json()["roles"] == ["tenant-admin"]
    page = client.get(base, params={"limit": 1}, headers=ADMIN).json()
    assert [p["name"] for p in page["items"]] == ["alpha-bot"]
    rest = client.get(base, params={"cursor": page["next_cursor"]}, headers=ADMIN).json()
    assert [p["name"] for p in rest["items"]] == ["robot"] and rest["next_cursor"] is None

    changed = client.put(
        f"{base}/robot", json={"kind": "user"}, headers={**ADMIN, "If-Match": '"1"'}
    )
    assert changed.status_code == 200 and changed.json()["version"] == 2
    error_of(client.delete(f"{base}/alpha-bot", headers=ADMIN), 409)  # holds a live key
    assert client.delete(f"{base}/robot", headers=ADMIN).status_code == 200
    error_of(client.get(f"{base}/robot", headers=ADMIN), 404)


def test_settings_prices_and_budget_period_are_read_and_changed(client: TestClient[Any]) -> None:
    read = client.get(f"{API}/settings", headers=ADMIN)
    assert read.status_code == 200 and read.json()["spec"]["budget_period"] == "month"
    prices = {"currency": "EUR", "flavors": {"h100": {"nvidia.com/gpu-hours": 2.5}}}
    changed = client.put(
        f"{API}/settings",
        json={"prices": prices, "budget_period": "week"},
        headers={**ADMIN, "If-Match": read.headers["etag"]},
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["spec"]["budget_period"] == "week"
    assert changed.json()["spec"]["prices"]["currency"] == "EUR"
    assert client.get(f"{API}/config", headers=ADMIN).json()["prices"]["currency"] == "EUR"
    stale = client.put(
        f"{API}/settings",
        json={"fair_sharing": True},
        headers={**ADMIN, "If-Match": read.headers["etag"]},
    )
    error_of(stale, 412)


def test_two_admins_racing_on_one_queue_the_second_gets_412(client: TestClient[Any]) -> None:
    first = client.get(f"{API}/config/cluster-queues/team-a", headers=ADMIN)
    second = client.get(f"{API}/config/cluster-queues/team-a", headers=ADMIN)
    etag = first.headers["etag"]
    assert etag == second.headers["etag"]
    won = client.put(
        f"{API}/config/cluster-queues/team-a",
        json=queue("team-a", 6),
        headers={**ADMIN, "If-Match": etag},
    )
    assert won.status_code == 200, won.text
    lost = client.put(
        f"{API}/config/cluster-queues/team-a",
        json=queue("team-a", 2),
        headers={**ADMIN, "If-Match": etag},
    )
    body = error_of(lost, 412)
    assert body["code"] == "version_mismatch" and "version" in body["message"]
    assert lost.headers["etag"] == won.headers["etag"]
    nominal = client.get(f"{API}/config/cluster-queues/team-a", headers=ADMIN).json()["spec"]
    assert nominal["resource_groups"][0]["flavors"][0]["quotas"]["nvidia.com/gpu"]["nominal"] == 6
    # No If-Match on an update: 428; a malformed one: 400; a stale delete: 412.
    error_of(
        client.put(f"{API}/config/cluster-queues/team-a", json=queue("team-a"), headers=ADMIN), 428
    )
    malformed = {**ADMIN, "If-Match": "yesterday"}
    error_of(
        client.put(f"{API}/config/cluster-queues/team-a", json=queue("team-a"), headers=malformed),
        400,
    )
    error_of(
        client.delete(f"{API}/config/cluster-queues/team-b", headers={**ADMIN, "If-Match": '"9"'}),
        412,
    )


def test_an_apply_bumps_the_versions_the_api_checks(client: TestClient[Any]) -> None:
    etag = client.get(f"{API}/config/cluster-queues/team-a", headers=ADMIN).headers["etag"]
    config = {**CONFIG, "cluster_queues": [queue("team-a", 7), CONFIG["cluster_queues"][1]]}
    assert client.post(f"{API}/config", json=config, headers=ADMIN).status_code == 201
    stale = client.put(
        f"{API}/config/cluster-queues/team-a",
        json=queue("team-a"),
        headers={**ADMIN, "If-Match": etag},
    )
    error_of(stale, 412)


def test_deleting_what_others_depend_on_is_refused_with_the_reason(
    client: TestClient[Any],
) -> None:
    body = error_of(client.delete(f"{API}/config/flavors/h100", headers=ADMIN), 409)
    assert "team-a" in body["message"]
    assert (
        client.post(f"{API}/config/cohorts", json={"name": "org"}, headers=ADMIN).status_code == 201
    )
    child = {"name": "lab", "parent": "org"}
    assert client.post(f"{API}/config/cohorts", json=child, headers=ADMIN).status_code == 201
    body = error_of(client.delete(f"{API}/config/cohorts/org", headers=ADMIN), 409)
    assert "lab" in body["message"]
    body = error_of(client.delete(f"{API}/config/cluster-queues/team-a", headers=ADMIN), 409)
    assert "alpha" in body["message"]
    # A queue with admitted work (its tenant moved off it first).
    member = key_for(client, "alpha")
    submitted = client.post(
        "/api/v1/workloads/",
        json=workload(max_runtime_seconds=600, job={"command": ["/usr/bin/sleep", "30"]}),
        headers=bearer(member),
    )
    assert submitted.status_code == 201, submitted.text
    workload_id = submitted.json()["id"]
    for _ in range(100):
        state = client.get(f"/api/v1/workloads/{workload_id}", headers=bearer(member)).json()
        if state["state"] in ("admitted", "running"):
            break
        time.sleep(0.1)
    assert state["state"] in ("admitted", "running"), state
    etag = client.get(f"{API}/tenants/alpha", headers=ADMIN).headers["etag"]
    moved = client.put(
        f"{API}/tenants/alpha", json={"queues": ["team-b"]}, headers={**ADMIN, "If-Match": etag}
    )
    assert moved.status_code == 200, moved.text
    body = error_of(client.delete(f"{API}/config/cluster-queues/team-a", headers=ADMIN), 409)
    assert "admitted work" in body["message"]
    cancelled = client.delete(f"/api/v1/workloads/{workload_id}", headers=bearer(member))
    assert cancelled.status_code == 200, cancelled.text


def test_an_invalid_quota_is_422_naming_the_field(client: TestClient[Any]) -> None:
    bad = queue("team-c")
    bad["resource_groups"][0]["flavors"][0]["quotas"]["nvidia.com/gpu"]["nominal"] = "lots"
    body = error_of(client.post(f"{API}/config/cluster-queues", json=bad, headers=ADMIN), 422)
    assert "nominal" in body["message"] and "team-c" in body["message"]
    unknown = queue("team-c")
    unknown["resource_groups"][0]["flavors"][0]["name"] = "tpu"
    body = error_of(client.post(f"{API}/config/cluster-queues", json=unknown, headers=ADMIN), 422)
    assert "tpu" in body["message"]
    error_of(
        client.post(f"{API}/config/cluster-queues", json={"name": "Bad Name"}, headers=ADMIN), 422
    )
    etag = client.get(f"{API}/config/cluster-queues/team-a", headers=ADMIN).headers["etag"]
    negative = queue("team-a", -1)
    error_of(
        client.put(
            f"{API}/config/cluster-queues/team-a",
            json=negative,
            headers={**ADMIN, "If-Match": etag},
        ),
        422,
    )
    # Nothing of it was written.
    assert client.get(f"{API}/config/cluster-queues/team-a", headers=ADMIN).headers["etag"] == etag
    error_of(client.get(f"{API}/config/cluster-queues/team-c", headers=ADMIN), 404)


def test_every_change_is_audited_and_read_back_with_filters(client: TestClient[Any]) -> None:
    client.post(f"{API}/config/flavors", json={"name": "a100"}, headers=ADMIN)
    client.post(f"{API}/config/cluster-queues", json=queue("team-c"), headers=ADMIN)
    client.put(
        f"{API}/config/cluster-queues/team-c",
        json=queue("team-c", 9),
        headers={**ADMIN, "If-Match": '"1"'},
    )
    client.delete(f"{API}/config/cluster-queues/team-c", headers=ADMIN)

    def audit(**params: Any) -> list[dict[str, Any]]:
        response = client.get(f"{API}/audit", params=params, headers=ADMIN)
        assert response.status_code == 200, response.text
        items: list[dict[str, Any]] = response.json()["items"]
        return items

    entries = audit(kind="cluster_queue", name="team-c")
    assert [e["action"] for e in entries] == ["delete", "update", "create"]  # newest first
    assert {e["actor"] for e in entries} == {"bootstrap-admin"}
    assert entries[1]["detail"]["resource_groups"][0]["flavors"][0]["quotas"]
    assert [e["name"] for e in audit(kind="flavor", action="create")] == ["a100", "h100"]
    assert audit(actor="nobody") == []
    first = audit(kind="cluster_queue", limit=1)
    assert len(first) == 1
    page = client.get(f"{API}/audit", params={"limit": 2}, headers=ADMIN).json()
    after = client.get(
        f"{API}/audit", params={"limit": 2, "cursor": page["next_cursor"]}, headers=ADMIN
    ).json()
    assert page["items"][-1]["id"] > after["items"][0]["id"]
    since = entries[0]["at"]
    assert [e["action"] for e in audit(kind="cluster_queue", since=since)] == ["delete"]
    assert audit(kind="cluster_queue", until=entries[-1]["at"], name="team-c") == []


def test_tenant_admins_and_members_may_not_change_anything_nor_see_other_tenants(
    client: TestClient[Any],
) -> None:
    tenant_admin = bearer(key_for(client, "alpha", ["tenant-admin"]))
    member_token = client.post(
        f"{API}/tenants/alpha/keys", json={"principal": "m", "roles": ["member"]}, headers=ADMIN
    ).json()["token"]
    member = bearer(member_token)
    # A tenant admin reads its own tenant and its principals.
    assert client.get(f"{API}/tenants/alpha", headers=tenant_admin).status_code == 200
    assert client.get(f"{API}/tenants/alpha/principals", headers=tenant_admin).status_code == 200
    # Not another tenant's.
    error_of(client.get(f"{API}/tenants/beta", headers=tenant_admin), 403)
    error_of(client.get(f"{API}/tenants/beta/principals", headers=tenant_admin), 403)
    for who in (tenant_admin, member):
        etag = {"If-Match": '"1"'}
        for method, path, body in (
            ("GET", f"{API}/config/cluster-queues", None),
            ("GET", f"{API}/config/cluster-queues/team-a", None),
            ("PUT", f"{API}/config/cluster-queues/team-a", queue("team-a", 99)),
            ("POST", f"{API}/config/flavors", {"name": "x"}),
            ("DELETE", f"{API}/config/cohorts/x", None),
            ("PUT", f"{API}/tenants/alpha", {"queues": ["team-a", "team-b"]}),
            ("POST", f"{API}/tenants", {"name": "x"}),
            ("POST", f"{API}/tenants/alpha/principals", {"name": "x"}),
            ("PUT", f"{API}/settings", {"fair_sharing": True}),
        ):
            response = client.request(method, path, json=body, headers={**who, **etag})
            error_of(response, 403)
    # The audit log: a tenant admin reads its own tenant's entries (see below), a member none.
    error_of(client.get(f"{API}/audit", headers=member), 403)
    error_of(client.get(f"{API}/tenants/alpha", headers=member), 403)
    error_of(client.get(f"{API}/tenants/alpha/principals", headers=member), 403)


def test_bad_input_is_answered_4xx_json(client: TestClient[Any]) -> None:
    for cursor in ("!!!", "bm90LWEtY3Vyc29y", "YTp4"):
        error_of(
            client.get(f"{API}/config/cluster-queues", params={"cursor": cursor}, headers=ADMIN),
            400,
        )
        error_of(client.get(f"{API}/audit", params={"cursor": cursor}, headers=ADMIN), 400)
    error_of(
        client.get(f"{API}/config/cluster-queues", params={"limit": 100000}, headers=ADMIN), 400
    )
    error_of(
        client.get(f"{API}/audit", params={"since": "2026-01-01T00:00:00"}, headers=ADMIN), 400
    )
    huge = {"name": "team-z", "padding": "x" * (2 * 1024 * 1024)}
    error_of(client.post(f"{API}/config/cluster-queues", json=huge, headers=ADMIN), 413)
    error_of(client.post(f"{API}/config/cluster-queues", content=b"{not json", headers=ADMIN), 400)
    error_of(client.post(f"{API}/config/cluster-queues", json=["a"], headers=ADMIN), 400)
    error_of(client.get(f"{API}/config/widgets", headers=ADMIN), 400)
    error_of(
        client.post(f"{API}/config/flavors", json={"name": "a1", "colour": 1}, headers=ADMIN), 422
    )


def test_lists_are_paged_with_a_cursor(client: TestClient[Any]) -> None:
    for i in range(5):
        made = client.post(f"{API}/config/cohorts", json={"name": f"c{i}"}, headers=ADMIN)
        assert made.status_code == 201, made.text
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = client.get(f"{API}/config/cohorts", params=params, headers=ADMIN).json()
        assert len(page["items"]) <= 2
        seen += [c["name"] for c in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"c{i}" for i in range(5)]


def test_a_model_has_a_version_and_its_updates_if_match(client: TestClient[Any]) -> None:
    entry = {"flavor": "h100", "endpoints": [{"base_url": "http://127.0.0.1:9/v1"}]}
    made = client.put(f"{API}/models/org/m1", json=entry, headers=ADMIN)
    assert made.status_code == 201, made.text
    got = client.get(f"{API}/models/org/m1", headers=ADMIN)
    assert got.status_code == 200, got.text
    assert got.json()["name"] == "org/m1" and got.headers["etag"] == f'"{got.json()["version"]}"'
    listed = client.get(f"{API}/models", headers=ADMIN)
    assert [m["name"] for m in listed.json()] == ["org/m1"]
    etag = got.headers["etag"]
    moved = {**entry, "endpoints": [{"base_url": "http://127.0.0.1:10/v1", "weight": 2}]}
    changed = client.put(f"{API}/models/org/m1", json=moved, headers={**ADMIN, "If-Match": etag})
    assert changed.status_code == 200, changed.text
    assert changed.json()["version"] == got.json()["version"] + 1
    error_of(
        client.put(f"{API}/models/org/m1", json=entry, headers={**ADMIN, "If-Match": etag}), 412
    )
    tenant = client.get(f"{API}/tenants/alpha", headers=ADMIN)
    listing = client.put(
        f"{API}/tenants/alpha",
        json={**tenant.json()["spec"], "models": ["org/m1"]},
        headers={**ADMIN, "If-Match": tenant.headers["etag"]},
    )
    assert listing.status_code == 200, listing.text
    body = error_of(client.delete(f"{API}/models/org/m1", headers=ADMIN), 409)
    assert "alpha" in body["message"]
    error_of(client.get(f"{API}/models/org/none", headers=ADMIN), 404)


def test_a_backend_token_variable_the_operator_does_not_allow_is_422(
    client: TestClient[Any],
) -> None:
    ray = {"name": "ray-x", "kind": "ray", "url": "http://127.0.0.1:8265", "token_env": "HOME"}
    body = error_of(client.post(f"{API}/config/backends", json=ray, headers=ADMIN), 422)
    assert "token_env" in body["message"] and "HOME" in body["message"]
    error_of(client.get(f"{API}/config/backends/ray-x", headers=ADMIN), 404)


def test_tenants_are_listed_a_page_at_a_time_by_name(client: TestClient[Any]) -> None:
    for name in ("delta", "gamma", "epsilon"):
        made = client.post(f"{API}/tenants", json={"name": name, "queues": []}, headers=ADMIN)
        assert made.status_code == 201, made.text
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        answer = client.get(f"{API}/tenants", params=params, headers=ADMIN)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        assert len(page["items"]) <= 2
        assert all(isinstance(t["version"], int) for t in page["items"])
        seen += [t["name"] for t in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["alpha", "beta", "delta", "epsilon", "gamma"]
    # A tenant deleted between two pages is not shown, and the rest keep their order.
    first = client.get(f"{API}/tenants", params={"limit": 2}, headers=ADMIN).json()
    etag = client.get(f"{API}/tenants/delta", headers=ADMIN).headers["etag"]
    assert (
        client.delete(f"{API}/tenants/delta", headers={**ADMIN, "If-Match": etag}).status_code
        == 200
    )
    rest = client.get(
        f"{API}/tenants", params={"cursor": first["next_cursor"]}, headers=ADMIN
    ).json()
    assert [t["name"] for t in rest["items"]] == ["epsilon", "gamma"]
    # Bounded, and only its own cursors: another list's (a name cursor) is refused.
    for limit in (0, 501, 100000):
        error_of(client.get(f"{API}/tenants", params={"limit": limit}, headers=ADMIN), 400)
    queues = client.get(f"{API}/config/cluster-queues", params={"limit": 1}, headers=ADMIN)
    other = queues.json()["next_cursor"]
    for cursor in ("!!!", other, "dDo"):
        error_of(client.get(f"{API}/tenants", params={"cursor": cursor}, headers=ADMIN), 400)
    tenant_admin = bearer(key_for(client, "alpha", ["tenant-admin"]))
    error_of(client.get(f"{API}/tenants", headers=tenant_admin), 403)


def test_a_tenant_delete_needs_the_version_it_read(client: TestClient[Any]) -> None:
    read = client.get(f"{API}/tenants/beta", headers=ADMIN)
    body = error_of(client.delete(f"{API}/tenants/beta", headers=ADMIN), 428)
    assert body["code"] == "if_match_required"
    changed = client.put(
        f"{API}/tenants/beta",
        json={"queues": ["team-b"]},
        headers={**ADMIN, "If-Match": read.headers["etag"]},
    )
    assert changed.status_code == 200, changed.text
    stale = client.delete(
        f"{API}/tenants/beta", headers={**ADMIN, "If-Match": read.headers["etag"]}
    )
    error_of(stale, 412)
    assert stale.headers["etag"] == changed.headers["etag"]
    error_of(client.delete(f"{API}/tenants/beta", headers={**ADMIN, "If-Match": "soon"}), 400)
    # Refused, nothing happened: beta is there, its key works.
    member = bearer(key_for(client, "beta"))
    assert client.get("/api/v1/workloads", headers=member).status_code == 200
    assert client.get(f"{API}/tenants/beta", headers=ADMIN).status_code == 200
    gone = client.delete(
        f"{API}/tenants/beta", headers={**ADMIN, "If-Match": changed.headers["etag"]}
    )
    assert gone.status_code == 200, gone.text
    assert gone.json()["keys_revoked"] == 1
    error_of(client.delete(f"{API}/tenants/beta", headers={**ADMIN, "If-Match": '"9"'}), 404)


def test_a_model_put_creates_when_absent_and_replaces_only_with_if_match(
    client: TestClient[Any],
) -> None:
    entry = {"flavor": "h100", "endpoints": [{"base_url": "http://127.0.0.1:9/v1"}]}
    made = client.put(f"{API}/models/org/m2", json=entry, headers=ADMIN)
    assert made.status_code == 201, made.text
    assert made.json()["version"] == 1 and made.headers["etag"] == '"1"'
    other = {**entry, "endpoints": [{"base_url": "http://127.0.0.1:10/v1"}]}
    # A second admin, unaware of the first, PUTs the same name: refused, not overwritten.
    body = error_of(client.put(f"{API}/models/org/m2", json=other, headers=ADMIN), 428)
    assert body["code"] == "if_match_required"
    got = client.get(f"{API}/models/org/m2", headers=ADMIN).json()
    assert got["endpoints"][0]["base_url"] == "http://127.0.0.1:9/v1" and got["version"] == 1
    error_of(
        client.put(f"{API}/models/org/m2", json=other, headers={**ADMIN, "If-Match": '"7"'}), 412
    )
    replaced = client.put(f"{API}/models/org/m2", json=other, headers={**ADMIN, "If-Match": '"1"'})
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["version"] == 2 and replaced.headers["etag"] == '"2"'
    # If-Match on a model that does not exist: 404, nothing made.
    error_of(
        client.put(f"{API}/models/org/none", json=entry, headers={**ADMIN, "If-Match": '"1"'}), 404
    )
    error_of(client.get(f"{API}/models/org/none", headers=ADMIN), 404)
    actions = [
        e["action"]
        for e in client.get(
            f"{API}/audit", params={"kind": "model", "name": "org/m2"}, headers=ADMIN
        ).json()["items"]
    ]
    assert actions == ["update", "create"]


def test_a_tenant_admin_reads_only_its_own_tenants_audit_entries(client: TestClient[Any]) -> None:
    """alpha's tenant admin tries every filter that could reach beta's entries or the
    platform's: it gets alpha's entries only, or nothing."""
    alpha_admin = bearer(key_for(client, "alpha", ["tenant-admin"]))
    beta_admin = bearer(key_for(client, "beta", ["tenant-admin"]))
    beta_key = client.post(
        f"{API}/tenants/beta/keys", json={"principal": "beta-ci"}, headers=beta_admin
    ).json()["key_id"]
    client.post(f"{API}/tenants/beta/principals", json={"name": "beta-robot"}, headers=ADMIN)
    client.post(f"{API}/config/flavors", json={"name": "a100"}, headers=ADMIN)
    alpha_member = key_for(client, "alpha")  # principal alpha-bot again: a member key

    def audit(who: dict[str, str], **params: Any) -> list[dict[str, Any]]:
        answer = client.get(f"{API}/audit", params=params, headers=who)
        assert answer.status_code == 200, answer.text
        items: list[dict[str, Any]] = answer.json()["items"]
        return items

    everything = audit(ADMIN, limit=500)
    assert {e["tenant"] for e in everything} >= {"alpha", "beta", None}
    mine = audit(alpha_admin, limit=500)
    assert mine and {e["tenant"] for e in mine} == {"alpha"}
    assert {e["kind"] for e in mine} <= {"tenant", "principal", "api_key", "workload"}
    assert ("api_key", "create") in {(e["kind"], e["action"]) for e in mine}
    assert [e["id"] for e in mine] == [e["id"] for e in everything if e["tenant"] == "alpha"]
    for hostile in (
        {"tenant": "beta"},
        {"tenant": "beta", "kind": "api_key"},
        {"name": "beta"},
        {"name": beta_key},
        {"name": "beta-robot"},
        {"kind": "flavor"},
        {"kind": "cluster_queue"},
        {"kind": "setting"},
        {"kind": "backend"},
        {"name": "a100"},
        {"actor": "bootstrap-admin", "tenant": "beta"},
        {"tenant": ""},
    ):
        assert audit(alpha_admin, **hostile) == [], hostile
    # Paging within its own entries never steps into another tenant's.
    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 1, **({"cursor": cursor} if cursor else {})}
        page = client.get(f"{API}/audit", params=params, headers=alpha_admin).json()
        seen += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [e["id"] for e in seen] == [e["id"] for e in mine]
    # A cursor pointing past beta's newest entry still yields alpha's only.
    newest_beta = max(e["id"] for e in everything if e["tenant"] == "beta")
    forged = base64.urlsafe_b64encode(f"a:{newest_beta + 1}".encode()).decode().rstrip("=")
    assert {e["tenant"] for e in audit(alpha_admin, cursor=forged)} <= {"alpha"}
    # beta's admin sees beta's, not alpha's; a member sees none.
    assert {e["tenant"] for e in audit(beta_admin)} == {"beta"}
    error_of(client.get(f"{API}/audit", headers=bearer(alpha_member)), 403)


def test_each_backend_has_its_own_version_apart_from_the_settings(
    client: TestClient[Any],
) -> None:
    ray = {"name": "ray-east", "kind": "ray", "url": "http://127.0.0.1:8265"}
    slurm = {
        "name": "hpc",
        "kind": "slurm",
        "url": "http://127.0.0.1:6820",
        "token_env": "IGNARA_SLURM_TOKEN",
    }
    for spec in (ray, slurm):
        made = client.post(f"{API}/config/backends", json=spec, headers=ADMIN)
        assert made.status_code == 201, made.text
        assert made.json()["version"] == 1
    settings = client.get(f"{API}/settings", headers=ADMIN).headers["etag"]
    hpc = client.get(f"{API}/config/backends/hpc", headers=ADMIN).headers["etag"]
    changed = client.put(
        f"{API}/config/backends/ray-east",
        json={**ray, "url": "http://127.0.0.1:8266"},
        headers={**ADMIN, "If-Match": '"1"'},
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["version"] == 2
    # The other backend and the settings did not move: their ETags still work.
    assert client.get(f"{API}/config/backends/hpc", headers=ADMIN).headers["etag"] == hpc
    assert client.get(f"{API}/settings", headers=ADMIN).headers["etag"] == settings
    moved = client.put(
        f"{API}/config/backends/hpc",
        json={**slurm, "url": "http://127.0.0.1:6821"},
        headers={**ADMIN, "If-Match": hpc},
    )
    assert moved.status_code == 200 and moved.json()["version"] == 2, moved.text
    fair = client.put(
        f"{API}/settings", json={"fair_sharing": True}, headers={**ADMIN, "If-Match": settings}
    )
    assert fair.status_code == 200, fair.text
    # A settings change moves no backend's version; a stale backend version is 412.
    assert client.get(f"{API}/config/backends/ray-east", headers=ADMIN).json()["version"] == 2
    error_of(
        client.put(
            f"{API}/config/backends/ray-east", json=ray, headers={**ADMIN, "If-Match": '"1"'}
        ),
        412,
    )
    listed = client.get(f"{API}/config/backends", headers=ADMIN).json()["items"]
    assert {b["name"]: b["version"] for b in listed} == {"hpc": 2, "ray-east": 2}
    # Each change is audited as the backend's own.
    entries = client.get(
        f"{API}/audit", params={"kind": "backend", "name": "ray-east"}, headers=ADMIN
    ).json()["items"]
    assert [e["action"] for e in entries] == ["update", "create"]
    # A config apply that changes one backend moves that one's version only.
    config = client.get(f"{API}/config", headers=ADMIN).json()
    config["backends"] = [
        {**b, "url": "http://127.0.0.1:6999"} if b["name"] == "hpc" else b
        for b in config["backends"]
    ]
    assert client.post(f"{API}/config", json=config, headers=ADMIN).status_code == 201
    listed = client.get(f"{API}/config/backends", headers=ADMIN).json()["items"]
    assert {b["name"]: b["version"] for b in listed} == {"hpc": 3, "ray-east": 2}
    removed = client.delete(f"{API}/config/backends/hpc", headers={**ADMIN, "If-Match": '"3"'})
    assert removed.status_code == 200, removed.text
