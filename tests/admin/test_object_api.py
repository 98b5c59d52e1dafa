"""The per-object admin API over HTTP: every object's create, read, list, update and
delete; versions and If-Match (412, 428); dependent deletes (409); quota checks (422);
the audit log; who may do what; bad input."""

from __future__ import annotations

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
    listed = client.get(f"{API}/tenants", headers=ADMIN).json()
    assert "gamma" in [t["name"] for t in listed]
    assert client.delete(f"{API}/tenants/gamma", headers=ADMIN).status_code == 200
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
            ("GET", f"{API}/audit", None),
        ):
            response = client.request(method, path, json=body, headers={**who, **etag})
            error_of(response, 403)
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
    assert made.status_code == 200, made.text
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
