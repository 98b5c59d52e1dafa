"""GPU-hour budgets through the API, as a new user meets them: two teams with 100
GPU-hours a month each in one cohort; one borrows the other's unused hours; a gang
that does not fit waits saying what it needs and what is left; the estimate endpoint
says whether and when it would start, storing nothing."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import AdmissionSettings, Settings
from quota.periods import BudgetPeriod, period_end
from tests.conftest import ADMIN_KEY
from tests.gateway.test_workload_api import bearer, key_for

HOURS = 3600


def team(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "cohort": "research",
        "resource_groups": [
            {
                "resources": ["nvidia.com/gpu", "nvidia.com/gpu-hours"],
                "flavors": [
                    {
                        "name": "h100",
                        "quotas": {
                            "nvidia.com/gpu": {"nominal": 16},
                            "nvidia.com/gpu-hours": {"nominal": 100},
                        },
                    }
                ],
            }
        ],
    }


CONFIG = {
    "flavors": ["h100"],
    "cohorts": [{"name": "research"}],
    "cluster_queues": [team("team-a"), team("team-b")],
    "tenants": [{"name": "alpha", "queues": ["team-a"]}, {"name": "beta", "queues": ["team-b"]}],
    "prices": {"currency": "USD", "flavors": {"h100": {"nvidia.com/gpu-hours": 2.5}}},
}


def gang(name: str, gpus: int, hours: int, queue: str = "team-a") -> dict[str, Any]:
    return {
        "name": name,
        "queue": queue,
        "pod_sets": [{"name": "workers", "count": gpus, "requests": {"nvidia.com/gpu": 1}}],
        "max_runtime_seconds": hours * HOURS,
        "job": {"command": ["/usr/bin/python3", "-c", "import time; time.sleep(60)"]},
    }


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient[Any]]:
    quick = dataclasses.replace(settings, admission=AdmissionSettings(estimate_interval=0.2))
    with TestClient(app=create_app(quick)) as client:
        admin = bearer(ADMIN_KEY)
        assert client.post("/api/v1/admin/config", json=CONFIG, headers=admin).status_code == 201
        yield client


def until(client: TestClient[Any], key: str, wid: str, check: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        body: dict[str, Any] = client.get(f"/api/v1/workloads/{wid}", headers=bearer(key)).json()
        if check(body):
            return body
        time.sleep(0.1)
    raise AssertionError(f"never happened: {body}")


def holds_quota(body: dict[str, Any]) -> bool:
    return body["state"] in ("admitted", "running")


def test_borrowing_hours_then_waiting_with_what_is_missing(client: TestClient[Any]) -> None:
    alpha = key_for(client, "alpha")
    # 8 GPUs x 10 h = 80 of team-a's 100 GPU-hours.
    first = client.post("/api/v1/workloads", json=gang("first", 8, 10), headers=bearer(alpha))
    assert first.status_code == 201, first.text
    until(client, alpha, first.json()["id"], holds_quota)

    # 9 x 12 h = 108 more: team-a borrows 88 of team-b's unused hours. The estimate
    # says so before anything is stored.
    ask = client.post(
        "/api/v1/workloads:estimate", json=gang("second", 9, 12), headers=bearer(alpha)
    )
    assert ask.status_code == 200, ask.text
    said = ask.json()
    assert said["estimate"] is True and "not a promise" in said["assumptions"]
    assert said["admitted_now"] is True and said["reason"] is None
    assert said["preempts"] == {"workloads": [], "others": 0}
    lines = {(b["level"], b["name"]): b for b in said["budgets"]}
    assert lines[("ClusterQueue", "team-a")]["commits"] == "108"
    assert lines[("ClusterQueue", "team-a")]["left"] == "120"  # its own 20 + 100 to borrow
    assert lines[("Cohort", "research")]["left_after"] == "12"
    listed = client.get("/api/v1/workloads", headers=bearer(alpha)).json()["items"]
    assert [w["name"] for w in listed] == ["first"]  # the estimate stored nothing

    second = client.post("/api/v1/workloads", json=gang("second", 9, 12), headers=bearer(alpha))
    until(client, alpha, second.json()["id"], holds_quota)

    # 8 x 8 h = 64 GPU-hours; 12 are left in the cohort: it waits, saying so.
    third = client.post("/api/v1/workloads", json=gang("third", 8, 8), headers=bearer(alpha))
    waiting = until(
        client, alpha, third.json()["id"], lambda b: b["reason"]["code"] == "InsufficientBudget"
    )
    assert waiting["state"] == "pending"
    assert "needs 64 GPU-hours, 12 left in cohort research for h100" in waiting["reason"]["message"]
    assert waiting["reason"]["blocking"] == [
        {
            "code": "InsufficientBudget",
            "level": "Cohort",
            "name": "research",
            "resource": "nvidia.com/gpu-hours",
            "flavor": "h100",
            "requested": "64",
            "available": "12",
        }
    ]
    # The hours come back with the next month: that is when it is expected to start.
    next_month = period_end(BudgetPeriod.MONTH, datetime.now(UTC))
    estimated = until(client, alpha, third.json()["id"], lambda b: b["estimated_start"])
    assert datetime.fromisoformat(estimated["estimated_start"]) == next_month
    again = client.post(
        "/api/v1/workloads:estimate", json=gang("fourth", 8, 8), headers=bearer(alpha)
    ).json()
    assert again["admitted_now"] is False
    assert datetime.fromisoformat(again["estimated_start"]) == next_month

    # Team-b's own hours: only 12 are left to it too, as lent hours are in use.
    beta = key_for(client, "beta")
    theirs = client.post(
        "/api/v1/workloads:estimate", json=gang("b1", 2, 10, "team-b"), headers=bearer(beta)
    ).json()
    assert theirs["admitted_now"] is False
    assert theirs["reason"]["code"] == "InsufficientBudget"

    # The first gang is cancelled while it runs: its 80 committed hours come back, what
    # it really ran is charged (to the ledger, which the next pass reads), and the
    # waiting gang starts.
    first_id = first.json()["id"]
    until(client, alpha, first_id, lambda b: b["state"] == "running")
    time.sleep(1)
    assert client.delete(f"/api/v1/workloads/{first_id}", headers=bearer(alpha)).status_code == 200
    cancelled = until(client, alpha, first_id, lambda b: b["state"] == "cancelled")
    until(client, alpha, third.json()["id"], holds_quota)
    ran = datetime.fromisoformat(cancelled["finished_at"]) - datetime.fromisoformat(
        cancelled["started_at"]
    )
    hours = 8 * ran.total_seconds() / HOURS
    month = datetime.now(UTC).strftime("%Y-%m")
    report = client.get(
        "/api/v1/usage", params={"month": month, "group_by": "queue"}, headers=bearer(alpha)
    ).json()
    [row] = report["rows"]
    assert row["group"] == {"queue": "team-a"}
    charged = float(row["amounts"]["nvidia.com/gpu-hours"])
    assert 0 < charged == pytest.approx(hours, abs=1e-5)
    assert report["currency"] == "USD"
    assert float(row["money"]) == pytest.approx(2.5 * charged, abs=0.01)
    assert (
        client.get("/api/v1/usage", params={"month": month}, headers=bearer(beta)).json()["rows"]
        == []
    )  # nothing of team-a's is beta's


def test_estimate_refuses_what_a_submission_would(client: TestClient[Any]) -> None:
    alpha = key_for(client, "alpha")
    theirs = gang("x", 1, 1, "team-b")
    other = client.post("/api/v1/workloads:estimate", json=theirs, headers=bearer(alpha))
    # Another tenant's queue: refused by the admission policy, as on submission.
    assert other.status_code == 403
    assert client.post("/api/v1/workloads", json=theirs, headers=bearer(alpha)).json() == (
        other.json()
    )
    budget = gang("x", 1, 1)
    budget["pod_sets"][0]["requests"] = {"nvidia.com/gpu-hours": 5}
    refused = client.post("/api/v1/workloads:estimate", json=budget, headers=bearer(alpha))
    assert refused.status_code == 422, refused.text
    assert "committed from max_runtime_seconds" in refused.json()["error"]["message"]
    stored = client.post("/api/v1/workloads", json=budget, headers=bearer(alpha))
    assert stored.status_code == 422
    bad = client.post("/api/v1/workloads:estimate", json={"name": "x"}, headers=bearer(alpha))
    assert bad.status_code == 400
    anonymous = client.post("/api/v1/workloads:estimate", json=gang("x", 1, 1))
    assert anonymous.status_code == 401
