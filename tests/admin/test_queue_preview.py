"""The preview of a cluster queue's quota change: what the next admission pass would
admit and preempt with it, computed by the engine, with nothing stored; one queue's
live state; every tenant's workloads for a platform admin."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import Settings
from tests.conftest import ADMIN_KEY

GPU = "nvidia.com/gpu"
PREVIEW = "/api/v1/admin/config/cluster-queues/{}/preview"


def queue(name: str, nominal: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "cohort": "pool",
        "resource_groups": [
            {
                "resources": [GPU],
                "flavors": [{"name": "h100", "quotas": {GPU: {"nominal": nominal}}}],
            }
        ],
        **extra,
    }


# team-b takes back what team-a borrows, preempting to do so.
RECLAIM = {"reclaim_within_cohort": "Any", "borrow_within_cohort": {"policy": "LowerPriority"}}
CONFIG: dict[str, Any] = {
    "flavors": ["h100"],
    "cohorts": [{"name": "pool"}],
    "cluster_queues": [queue("team-a", 4), queue("team-b", 4, preemption=RECLAIM)],
    "tenants": [
        {"name": "alpha", "queues": ["team-a"]},
        {"name": "beta", "queues": ["team-b"]},
    ],
}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


ADMIN = bearer(ADMIN_KEY)


def gang(
    name: str, queue: str, gpus: int, *, priority: int = 0, seconds: int = 0
) -> dict[str, Any]:
    return {
        "name": name,
        "queue": queue,
        "priority": priority,
        "pod_sets": [{"name": "main", "count": 1, "requests": {GPU: gpus}}],
        "max_runtime_seconds": 120,
        "job": {"command": ["/usr/bin/python3", "-c", f"import time; time.sleep({seconds})"]},
    }


def key(client: TestClient[Any], tenant: str, role: str = "member") -> str:
    answer = client.post(
        f"/api/v1/admin/tenants/{tenant}/keys",
        json={"principal": f"{tenant}-{role}", "roles": [role]},
        headers=ADMIN,
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["token"])


def submit(client: TestClient[Any], token: str, body: dict[str, Any]) -> str:
    answer = client.post("/api/v1/workloads", json=body, headers=bearer(token))
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def state_of(client: TestClient[Any], token: str, workload: str) -> str:
    return str(client.get(f"/api/v1/workloads/{workload}", headers=bearer(token)).json()["state"])


def wait_for(client: TestClient[Any], token: str, workload: str, states: set[str]) -> None:
    deadline = time.monotonic() + 20
    while state_of(client, token, workload) not in states:
        assert time.monotonic() < deadline, f"{workload} never reached {states}"
        time.sleep(0.2)


def spec_of(client: TestClient[Any], name: str) -> tuple[dict[str, Any], str]:
    answer = client.get(f"/api/v1/admin/config/cluster-queues/{name}", headers=ADMIN)
    assert answer.status_code == 200, answer.text
    return dict(answer.json()["spec"]), answer.headers["etag"]


def with_nominal(spec: dict[str, Any], nominal: int) -> dict[str, Any]:
    changed = copy.deepcopy(spec)
    changed["resource_groups"][0]["flavors"][0]["quotas"][GPU]["nominal"] = nominal
    return changed


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient[Any]]:
    with TestClient(app=create_app(settings)) as client:
        answer = client.post("/api/v1/admin/config", json=CONFIG, headers=ADMIN)
        assert answer.status_code == 201, answer.text
        yield client


def test_raising_nominal_previews_the_waiting_gang_admitted_and_stores_nothing(
    client: TestClient[Any],
) -> None:
    alpha = key(client, "alpha")
    waiting = submit(client, alpha, gang("too-big", "team-a", 10))  # the cohort holds 8
    time.sleep(1.5)  # passes of the loop go by: it still waits
    assert state_of(client, alpha, waiting) == "pending"
    spec, etag = spec_of(client, "team-a")

    answer = client.post(
        PREVIEW.format("team-a"),
        json=with_nominal(spec, 10),
        headers={**ADMIN, "If-Match": etag},
    )
    assert answer.status_code == 200, answer.text
    preview = answer.json()
    assert [w["id"] for w in preview["admitted"]] == [waiting]
    assert preview["admitted"][0]["tenant"] == "alpha"
    assert preview["admitted"][0]["queue"] == "team-a"
    assert preview["admitted"][0]["because_of_change"] is True
    assert preview["preempted"] == [] and preview["preempted_count"] == 0
    assert preview["still_pending"] == 0

    time.sleep(1.5)  # the loop runs on: the preview changed nothing it reads
    assert state_of(client, alpha, waiting) == "pending"
    after, etag_after = spec_of(client, "team-a")
    assert (after, etag_after) == (spec, etag)
    # Unchanged, the preview admits nothing.
    same = client.post(PREVIEW.format("team-a"), json=spec, headers=ADMIN).json()
    assert same["admitted"] == [] and same["preempted"] == []


def test_lowering_nominal_below_usage_lists_the_reclaim_preemptions(
    client: TestClient[Any],
) -> None:
    alpha, beta = key(client, "alpha"), key(client, "beta")
    running = submit(client, alpha, gang("holds-four", "team-a", 4, seconds=30))
    wait_for(client, alpha, running, {"admitted", "running"})
    waiting = submit(client, beta, gang("needs-five", "team-b", 5, priority=10))
    time.sleep(1.5)
    assert state_of(client, beta, waiting) == "pending"  # team-a borrows nothing yet
    try:
        spec, _ = spec_of(client, "team-a")
        answer = client.post(PREVIEW.format("team-a"), json=with_nominal(spec, 2), headers=ADMIN)
        assert answer.status_code == 200, answer.text
        preview = answer.json()
        assert [(w["id"], w["tenant"], w["queue"]) for w in preview["preempted"]] == [
            (running, "alpha", "team-a")
        ]
        assert preview["preempted"][0]["by"] == waiting
        assert [(w["id"], w["tenant"]) for w in preview["admitted"]] == [(waiting, "beta")]
        assert state_of(client, alpha, running) in {"admitted", "running"}
        assert state_of(client, beta, waiting) == "pending"
    finally:
        client.delete(f"/api/v1/workloads/{running}", headers=bearer(alpha))


def test_only_platform_admins_preview_and_bad_bodies_are_422(client: TestClient[Any]) -> None:
    spec, _ = spec_of(client, "team-a")
    lead = key(client, "alpha", "tenant-admin")
    refused = client.post(PREVIEW.format("team-a"), json=spec, headers=bearer(lead))
    assert refused.status_code == 403
    member = key(client, "beta")
    assert (
        client.post(PREVIEW.format("team-a"), json=spec, headers=bearer(member)).status_code == 403
    )
    assert client.post(PREVIEW.format("team-a"), json=spec).status_code == 401

    for bad in (
        with_nominal(spec, -1),
        {**spec, "resource_groups": "many"},
        {**spec, "resource_groups": [{"resources": [GPU], "flavors": [{"name": "a100"}]}]},
        {**spec, "name": "team-b"},
        {**spec, "surprise": True},
    ):
        answer = client.post(PREVIEW.format("team-a"), json=bad, headers=ADMIN)
        assert answer.status_code == 422, (bad, answer.text)
        assert answer.json()["error"]["message"]
    unnamed = {k: v for k, v in spec.items() if k != "name"}
    assert client.post(PREVIEW.format("no-such"), json=unnamed, headers=ADMIN).status_code == 404
    other = client.post("/api/v1/admin/config/flavors/h100/preview", json={}, headers=ADMIN)
    assert other.status_code == 400
    stale = client.post(PREVIEW.format("team-a"), json=spec, headers={**ADMIN, "If-Match": '"99"'})
    assert stale.status_code == 412


def test_one_queues_live_state(client: TestClient[Any]) -> None:
    deadline = time.monotonic() + 10
    # The live board is the last pass's (or a snapshot up to two seconds old).
    while (answer := client.get("/api/v1/admin/queues/team-a", headers=ADMIN)).status_code == 404:
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.2)
    assert answer.status_code == 200, answer.text
    assert answer.json()["name"] == "team-a" and answer.json()["cohort"] == "pool"
    assert answer.json()["resources"][0]["nominal"] == 4
    assert client.get("/api/v1/admin/queues/nope", headers=ADMIN).status_code == 404
    lead = bearer(key(client, "alpha", "tenant-admin"))
    assert client.get("/api/v1/admin/queues/team-a", headers=lead).status_code == 200
    # another tenant's queue is as absent as a missing one
    assert client.get("/api/v1/admin/queues/team-b", headers=lead).status_code == 404


def test_a_platform_admin_lists_every_tenants_workloads(client: TestClient[Any]) -> None:
    alpha, beta = key(client, "alpha"), key(client, "beta")
    a = submit(client, alpha, gang("a-big", "team-a", 10))
    b = submit(client, beta, gang("b-big", "team-b", 10))
    every = client.get("/api/v1/admin/workloads", headers=ADMIN)
    assert every.status_code == 200, every.text
    assert [w["id"] for w in every.json()["items"]] == [a, b]
    only_beta = client.get("/api/v1/admin/workloads", params={"tenant": "beta"}, headers=ADMIN)
    assert [w["id"] for w in only_beta.json()["items"]] == [b]
    by_queue = client.get(
        "/api/v1/admin/workloads", params={"queue": "team-a", "state": "pending"}, headers=ADMIN
    )
    assert [w["id"] for w in by_queue.json()["items"]] == [a]
    first = client.get("/api/v1/admin/workloads", params={"limit": 1}, headers=ADMIN).json()
    assert [w["id"] for w in first["items"]] == [a] and first["next_cursor"]
    second = client.get(
        "/api/v1/admin/workloads",
        params={"limit": 1, "cursor": first["next_cursor"]},
        headers=ADMIN,
    ).json()
    assert [w["id"] for w in second["items"]] == [b] and second["next_cursor"] is None
    bad = client.get("/api/v1/admin/workloads", params={"cursor": "x"}, headers=ADMIN)
    assert bad.status_code == 400
    lead = bearer(key(client, "alpha", "tenant-admin"))
    assert client.get("/api/v1/admin/workloads", headers=lead).status_code == 403
