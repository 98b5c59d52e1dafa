"""The workload and admin APIs end to end: keys, isolation, idempotency, bad input,
and a submitted gang that really runs on the local backend."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import Settings
from tests.conftest import ADMIN_KEY

CONFIG = {
    "flavors": ["h100"],
    "cluster_queues": [
        {
            "name": q,
            "resource_groups": [
                {
                    "resources": ["nvidia.com/gpu", "cpu"],
                    "flavors": [
                        {
                            "name": "h100",
                            "quotas": {"nvidia.com/gpu": {"nominal": 4}, "cpu": {"nominal": "32"}},
                        }
                    ],
                }
            ],
        }
        for q in ("team-a", "team-b")
    ],
    "tenants": [
        {"name": "alpha", "queues": ["team-a"]},
        {"name": "beta", "queues": ["team-b"], "limits": {"max_pods_per_workload": 2}},
    ],
}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def workload(name: str = "train", **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "queue": "team-a",
        "pod_sets": [
            {"name": "workers", "count": 2, "requests": {"nvidia.com/gpu": 1, "cpu": "500m"}}
        ],
        "max_runtime_seconds": 60,
        # The system's python3: the gateway's venv is not inside the job's sandbox.
        "job": {"command": ["/usr/bin/python3", "-c", "print('epoch 1 done')"]},
    }
    body.update(overrides)
    return body


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient[Any]]:
    with TestClient(app=create_app(settings)) as client:
        admin = bearer(ADMIN_KEY)
        assert client.post("/api/v1/admin/config", json=CONFIG, headers=admin).status_code == 201
        yield client


def key_for(client: TestClient[Any], tenant: str, roles: list[str] | None = None) -> str:
    response = client.post(
        f"/api/v1/admin/tenants/{tenant}/keys",
        json={"principal": f"{tenant}-bot", "roles": roles or ["member"]},
        headers=bearer(ADMIN_KEY),
    )
    assert response.status_code == 201, response.text
    token: str = response.json()["token"]
    return token


def wait_for(client: TestClient[Any], key: str, workload_id: str, state: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        body: dict[str, Any] = client.get(
            f"/api/v1/workloads/{workload_id}", headers=bearer(key)
        ).json()
        if body["state"] == state:
            return body
        time.sleep(0.1)
    raise AssertionError(f"never reached {state}: {body}")


def test_a_gang_is_submitted_admitted_run_and_its_logs_read(client: TestClient[Any]) -> None:
    alpha = key_for(client, "alpha")
    created = client.post("/api/v1/workloads", json=workload(), headers=bearer(alpha))
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["state"], body["tenant"], body["reason"]["code"]) == ("pending", "alpha", "Queued")
    done = wait_for(client, alpha, body["id"], "succeeded")
    assert done["admission"]["pod_sets"][0] == {
        "name": "workers",
        "count": 2,
        "flavors": {"nvidia.com/gpu": "h100", "cpu": "h100"},
    }
    logs = client.get(f"/api/v1/workloads/{body['id']}/logs", headers=bearer(alpha))
    assert logs.status_code == 200 and "epoch 1 done" in logs.text
    first = client.get(f"/api/v1/workloads/{body['id']}/logs?attempt=1", headers=bearer(alpha))
    assert first.status_code == 200 and first.text == logs.text
    never = client.get(f"/api/v1/workloads/{body['id']}/logs?attempt=2", headers=bearer(alpha))
    assert never.status_code == 404
    assert never.json()["error"]["message"] == (
        f"workload {body['id']} has no run 2: it has run 1 time(s)"
    )
    zero = client.get(f"/api/v1/workloads/{body['id']}/logs?attempt=0", headers=bearer(alpha))
    assert zero.status_code == 400 and zero.json()["error"]["code"] == "invalid_request"


def test_a_workload_shows_its_timeline_to_its_own_tenant_only(client: TestClient[Any]) -> None:
    alpha, beta = key_for(client, "alpha"), key_for(client, "beta")
    slow = workload(job={"command": ["/usr/bin/python3", "-c", "import time; time.sleep(2)"]})
    wid = client.post("/api/v1/workloads", json=slow, headers=bearer(alpha)).json()["id"]
    done = wait_for(client, alpha, wid, "succeeded")
    events = done["events"]
    assert [e["type"] for e in events] == [
        "submitted",
        "admitted",
        "dispatched",
        "running",
        "finished",
    ]
    assert done["event_count"] == 5
    assert events[1]["detail"] == {"queue": "team-a", "flavors": ["h100"]}
    assert events[2]["detail"]["backend"] == "local"
    assert events[2]["detail"]["job"] == f"{wid}-1"
    assert events[-1]["detail"]["exit_code"] == 0 == done["exit_code"]
    assert [e["attempt"] for e in events] == [0, 1, 1, 1, 1]
    times = [e["at"] for e in events]
    assert times == sorted(times)
    assert client.get(f"/api/v1/workloads/{wid}", headers=bearer(beta)).status_code == 404
    # A list stays light: the timeline is read one workload at a time.
    listed = client.get("/api/v1/workloads", headers=bearer(alpha)).json()["items"]
    assert "events" not in listed[0]


def test_a_cancelled_pending_workload_says_so_in_its_timeline(client: TestClient[Any]) -> None:
    alpha = bearer(key_for(client, "alpha"))
    big = workload(
        pod_sets=[{"name": "workers", "count": 8, "requests": {"nvidia.com/gpu": 1}}]
    )  # more than team-a's 4 GPUs: it waits
    wid = client.post("/api/v1/workloads", json=big, headers=alpha).json()["id"]
    assert client.delete(f"/api/v1/workloads/{wid}", headers=alpha).status_code == 200
    body = client.get(f"/api/v1/workloads/{wid}", headers=alpha).json()
    assert [(e["type"], e["detail"]) for e in body["events"]] == [
        ("submitted", {"queue": "team-a"}),
        ("cancelled", {"by": "alpha-bot"}),
    ]


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"qos": 7}, "slurm.qos"),
        ({"qos": "high; rm -rf /"}, "slurm.qos"),
        ({"partition": "other"}, "slurm.partition"),  # not on the allow-list
        ({"nice": -5}, "slurm.nice"),
        ({"exclusive": "yes"}, "slurm.exclusive"),
        # Well-formed, but this workload goes to the local backend: not for it.
        ({"qos": "high"}, "slurm"),
    ],
)
def test_a_bad_backend_section_is_a_422_naming_the_field_and_stores_nothing(
    client: TestClient[Any], section: Any, field: str
) -> None:
    alpha = bearer(key_for(client, "alpha"))
    response = client.post("/api/v1/workloads", json=workload(slurm=section), headers=alpha)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["message"].startswith(f"{field}: "), error
    assert client.get("/api/v1/workloads", headers=alpha).json()["items"] == []
    # Not even an object: a malformed body, a 400 naming it like any other.
    response = client.post("/api/v1/workloads", json=workload(slurm="fast"), headers=alpha)
    assert response.status_code == 400 and response.json()["error"]["message"].startswith("slurm")


def test_idempotency_key_returns_the_first_result(client: TestClient[Any]) -> None:
    alpha = bearer(key_for(client, "alpha"))
    headers = {**alpha, "Idempotency-Key": "run-42"}
    first = client.post("/api/v1/workloads", json=workload(), headers=headers)
    again = client.post("/api/v1/workloads", json=workload(), headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    other = client.post("/api/v1/workloads", json=workload("other"), headers=headers)
    assert other.status_code == 409 and other.json()["error"]["code"] == "conflict"
    listed = client.get("/api/v1/workloads", headers=alpha).json()
    assert [w["id"] for w in listed["items"]] == [first.json()["id"]]


def test_tenants_are_isolated(client: TestClient[Any]) -> None:
    alpha, beta = bearer(key_for(client, "alpha")), bearer(key_for(client, "beta"))
    wid = client.post("/api/v1/workloads", json=workload(), headers=alpha).json()["id"]
    assert client.get("/api/v1/workloads", headers=beta).json()["items"] == []
    for method, path in (
        ("GET", f"/api/v1/workloads/{wid}"),
        ("DELETE", f"/api/v1/workloads/{wid}"),
        ("GET", f"/api/v1/workloads/{wid}/logs"),
    ):
        response = client.request(method, path, headers=beta)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["error"]["code"] == "not_found"
    into_alpha = client.post(
        "/api/v1/workloads", json=workload(), headers=beta
    )  # team-a is alpha's
    assert into_alpha.status_code == 403
    assert into_alpha.json()["error"]["code"] == "policy_denied"
    assert client.get(f"/api/v1/workloads/{wid}", headers=alpha).status_code == 200


def test_credentials_and_roles(client: TestClient[Any]) -> None:
    assert client.get("/api/v1/workloads").status_code == 401
    bad = client.get("/api/v1/workloads", headers=bearer("ign_live_0123456789ab_" + "x" * 43))
    assert bad.status_code == 401 and bad.json()["error"]["code"]
    member = key_for(client, "alpha")
    for path in ("/api/v1/admin/tenants", "/api/v1/admin/tenants/beta/keys"):
        denied = client.get(path, headers=bearer(member))
        assert denied.status_code == 403 and denied.json()["error"]["code"] == "forbidden"
    tenant_admin = key_for(client, "alpha", ["tenant-admin"])
    assert (
        client.get("/api/v1/admin/tenants/alpha/keys", headers=bearer(tenant_admin)).status_code
        == 200
    )
    minted = client.post(
        "/api/v1/admin/tenants/alpha/keys",
        json={"principal": "sneaky", "roles": ["admin"]},
        headers=bearer(tenant_admin),
    )
    assert minted.status_code == 403
    key_id = member.split("_")[2]
    revoked = client.delete(
        f"/api/v1/admin/tenants/alpha/keys/{key_id}", headers=bearer(tenant_admin)
    )
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    assert client.get("/api/v1/workloads", headers=bearer(member)).status_code == 401


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (workload(pod_sets=[{"name": "w", "count": -1, "requests": {}}]), 400),
        (workload(pod_sets=[{"name": "w", "count": 10**9, "requests": {}}]), 400),
        (workload(priority=10**12), 400),
        (workload(colour="blue"), 400),
        (workload(pod_sets=[]), 400),
        (workload(job={"command": []}), 400),
        (workload(max_runtime_seconds=0), 400),
        (workload(name="Not A Name!"), 400),
        (workload(pod_sets=[{"name": "w", "count": 1, "requests": {"cpu": "lots"}}]), 422),
        (workload(pod_sets=[{"name": "w", "count": 1, "requests": {"example.com/tpu": 1}}]), 422),
        (workload(pod_sets=[{"name": "w", "count": 1, "min_count": 2, "requests": {}}]), 422),
        (workload(queue="team-z"), 403),  # not open to alpha: the admission policy says so
    ],
)
def test_bad_input_gets_a_clear_4xx(
    client: TestClient[Any], body: dict[str, Any], status: int
) -> None:
    alpha = bearer(key_for(client, "alpha"))
    response = client.post("/api/v1/workloads", json=body, headers=alpha)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] and error["message"] and "Traceback" not in response.text
    assert client.get("/api/v1/workloads", headers=alpha).json()["items"] == []  # nothing written


def test_malformed_and_oversized_bodies(client: TestClient[Any]) -> None:
    alpha = {**bearer(key_for(client, "alpha")), "Content-Type": "application/json"}
    broken = client.post("/api/v1/workloads", content=b"{not json", headers=alpha)
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "invalid_request"
    huge = client.post("/api/v1/workloads", content=b"[" + b"1," * 700_000 + b"1]", headers=alpha)
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "request_too_large"


def test_policy_denials_reach_the_caller_with_reasons(client: TestClient[Any]) -> None:
    alpha = bearer(key_for(client, "alpha"))
    refused = client.post("/api/v1/workloads", json=workload(backend="slurm"), headers=alpha)
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert error["code"] == "policy_denied" and "slurm" in error["message"]
    admin_submit = client.post("/api/v1/workloads", json=workload(), headers=bearer(ADMIN_KEY))
    assert admin_submit.status_code == 403  # nobody spends another tenant's quota


def test_a_waiting_workload_names_what_blocks_it(client: TestClient[Any]) -> None:
    alpha = bearer(key_for(client, "alpha"))
    too_big = workload(
        pod_sets=[{"name": "workers", "count": 5, "requests": {"nvidia.com/gpu": 1}}]
    )
    wid = client.post("/api/v1/workloads", json=too_big, headers=alpha).json()["id"]
    deadline = time.monotonic() + 20
    reason: dict[str, Any] = {}
    while time.monotonic() < deadline:
        reason = client.get(f"/api/v1/workloads/{wid}", headers=alpha).json()["reason"]
        if reason["code"] != "Queued":
            break
        time.sleep(0.1)
    assert reason["code"] == "ExceedsMaxQuota", reason
    assert reason["blocking"] == [
        {
            "code": "ExceedsMaxQuota",
            "level": "ClusterQueue",
            "name": "team-a",
            "resource": "nvidia.com/gpu",
            "flavor": "h100",
            "requested": "5",
            "available": "4",
        }
    ]
    assert "more than cluster queue team-a can ever provide" in reason["message"]


def test_tenant_limits_from_the_config_are_enforced(client: TestClient[Any]) -> None:
    beta = bearer(key_for(client, "beta"))
    gang = workload(
        queue="team-b", pod_sets=[{"name": "w", "count": 3, "requests": {"nvidia.com/gpu": 1}}]
    )
    refused = client.post("/api/v1/workloads", json=gang, headers=beta)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "policy_denied"
    assert "3" in refused.json()["error"]["message"]


def test_the_config_reads_back_as_applied(client: TestClient[Any]) -> None:
    admin = bearer(ADMIN_KEY)
    stored = client.get("/api/v1/admin/config", headers=admin).json()
    assert [q["name"] for q in stored["cluster_queues"]] == ["team-a", "team-b"]
    assert stored["tenants"][1]["limits"] == {"max_pods_per_workload": 2}
    again = client.post("/api/v1/admin/config", json=stored, headers=admin).json()
    assert again == {"created": [], "updated": [], "deleted": []}
