"""`GET /api/v1/usage` as a chargeback report: GPU-hours and tokens per day, week or
month, grouped, in amounts and money; a tenant's own only (admins any, or all); every
bad parameter a 400 naming it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import Settings
from tenants import Database
from tenants.services.charges import insert_charges
from tenants.services.usage import UsageRecord, insert_usage
from tests.conftest import ADMIN_KEY
from tests.gateway.test_workload_api import bearer, key_for

GPU_HOURS = "nvidia.com/gpu-hours"


def queue(name: str, cohort: str) -> dict[str, Any]:
    return {
        "name": name,
        "cohort": cohort,
        "resource_groups": [
            {
                "resources": ["nvidia.com/gpu"],
                "flavors": [
                    {"name": f, "quotas": {"nvidia.com/gpu": {"nominal": 4}}}
                    for f in ("h100", "a100")
                ],
            },
            {
                "resources": ["tokens-per-minute"],
                "flavors": [{"name": "pool", "quotas": {"tokens-per-minute": {"nominal": 1000}}}],
            },
        ],
    }


CONFIG = {
    "flavors": ["h100", "a100", "pool"],
    "cohorts": [{"name": "research"}],
    "cluster_queues": [
        queue("team-a", "research"),
        queue("team-a2", "research"),
        queue("team-b", "research"),
    ],
    "tenants": [
        {"name": "alpha", "queues": ["team-a", "team-a2"]},
        {"name": "beta", "queues": ["team-b"]},
    ],
    "prices": {
        "currency": "USD",
        "flavors": {
            "h100": {GPU_HOURS: "2.50"},
            "pool": {"input-tokens": "0.20", "output-tokens": "0.80"},
        },
    },
}


def run(tenant: str, queue: str, flavor: str, day: date, hours: str, wid: str) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "queue": queue,
        "cohort_path": "research",
        "flavor": flavor,
        "resource": GPU_HOURS,
        "amount": Decimal(hours),
        "model": None,
        "workload_id": wid,
        "attempt": 1,
        "call_id": None,
        "day": day,
        "at": datetime.now(UTC),
    }


def call(tenant: str, queue: str, day: date, prompt: int, completion: int, n: int) -> UsageRecord:
    return UsageRecord(
        tenant=tenant,
        principal=f"{tenant}-bot",
        queue=queue,
        model="llama",
        flavor="pool",
        status=200,
        prompt_tokens=prompt,
        completion_tokens=completion,
        created_at=datetime(day.year, day.month, day.day, 9, tzinfo=UTC),
        reservation=f"{tenant}.{n}",
    )


def store(settings: Settings) -> None:
    async def write() -> None:
        database = Database(settings.database.url)
        try:
            async with database.session() as session:
                await insert_charges(
                    session,
                    [
                        run("alpha", "team-a", "h100", date(2026, 11, 2), "16", "w1"),  # Monday
                        run("alpha", "team-a", "h100", date(2026, 11, 8), "4", "w2"),  # Sunday
                        run("alpha", "team-a2", "a100", date(2026, 11, 9), "1.5", "w3"),
                        run("alpha", "team-a", "h100", date(2026, 10, 31), "100", "w4"),
                        run("alpha", "team-a", "h100", date(2026, 12, 1), "100", "w5"),
                        run("beta", "team-b", "h100", date(2026, 11, 3), "7777", "w6"),
                    ],
                )
                await insert_usage(
                    session,
                    [
                        call("alpha", "team-a", date(2026, 11, 2), 1_000_000, 250_000, 1),
                        call("alpha", "team-a2", date(2026, 11, 20), 500_000, 0, 2),
                        call("beta", "team-b", date(2026, 11, 3), 9_999, 9_999, 3),
                    ],
                )
        finally:
            await database.dispose()

    asyncio.run(write())


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient[Any]]:
    with TestClient(app=create_app(settings)) as client:
        admin = bearer(ADMIN_KEY)
        response = client.post("/api/v1/admin/config", json=CONFIG, headers=admin)
        assert response.status_code == 201, response.text
        store(settings)
        yield client


NOVEMBER = {"month": "2026-11"}


def test_a_months_report_by_queue_in_both_currencies(client: TestClient[Any]) -> None:
    alpha = bearer(key_for(client, "alpha"))
    response = client.get("/api/v1/usage", params={**NOVEMBER, "group_by": "queue"}, headers=alpha)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "tenant": "alpha",
        "start": "2026-11-01",
        "end": "2026-11-30",
        "per": "month",
        "group_by": ["queue"],
        "currency": "USD",
        "rows": [
            {
                "period": "2026-11-01",
                "group": {"queue": "team-a"},
                # 20 GPU-hours x 2.50; a million input x 0.20, a quarter output x 0.80
                "amounts": {GPU_HOURS: "20", "input-tokens": "1000000", "output-tokens": "250000"},
                "money": "50.40",
                "unpriced": [],
            },
            {
                "period": "2026-11-01",
                "group": {"queue": "team-a2"},
                "amounts": {GPU_HOURS: "1.5", "input-tokens": "500000"},
                "money": "0.10",  # a100 has no price
                "unpriced": [GPU_HOURS],
            },
        ],
        "totals": {
            "amounts": {GPU_HOURS: "21.5", "input-tokens": "1500000", "output-tokens": "250000"},
            "money": "50.50",
            "unpriced": [GPU_HOURS],
        },
    }


def test_per_week_and_day_grouped_by_flavor_model_and_resource(client: TestClient[Any]) -> None:
    alpha = bearer(key_for(client, "alpha"))
    weekly = client.get(
        "/api/v1/usage",
        params={**NOVEMBER, "per": "week", "group_by": "resource,flavor"},
        headers=alpha,
    ).json()
    assert [(r["period"], r["group"]["resource"], r["amounts"]) for r in weekly["rows"]] == [
        ("2026-11-02", "input-tokens", {"input-tokens": "1000000"}),
        ("2026-11-02", GPU_HOURS, {GPU_HOURS: "20"}),  # Monday 2 and Sunday 8
        ("2026-11-02", "output-tokens", {"output-tokens": "250000"}),
        ("2026-11-09", GPU_HOURS, {GPU_HOURS: "1.5"}),
        ("2026-11-16", "input-tokens", {"input-tokens": "500000"}),
    ]
    daily = client.get(
        "/api/v1/usage",
        params={"start": "2026-11-01", "end": "2026-11-09", "per": "day", "group_by": "model"},
        headers=alpha,
    ).json()
    assert [(r["period"], r["group"], r["amounts"]) for r in daily["rows"]] == [
        ("2026-11-02", {"model": None}, {GPU_HOURS: "16"}),
        ("2026-11-02", {"model": "llama"}, {"input-tokens": "1000000", "output-tokens": "250000"}),
        ("2026-11-08", {"model": None}, {GPU_HOURS: "4"}),
        ("2026-11-09", {"model": None}, {GPU_HOURS: "1.5"}),
    ]
    only = client.get("/api/v1/usage", params={**NOVEMBER, "model": "llama"}, headers=alpha).json()
    assert only["totals"]["amounts"] == {"input-tokens": "1500000", "output-tokens": "250000"}


def test_a_tenant_never_reads_another_tenants_charges(client: TestClient[Any]) -> None:
    beta = bearer(key_for(client, "beta", ["tenant-admin"]))
    own = client.get(
        "/api/v1/usage", params={**NOVEMBER, "group_by": "tenant,queue"}, headers=beta
    ).json()
    assert own["tenant"] == "beta"
    assert {r["group"]["tenant"] for r in own["rows"]} == {"beta"}
    assert own["totals"]["amounts"] == {
        GPU_HOURS: "7777",
        "input-tokens": "9999",
        "output-tokens": "9999",
    }
    for tenant in ("alpha", "*"):
        response = client.get("/api/v1/usage", params={**NOVEMBER, "tenant": tenant}, headers=beta)
        assert response.status_code == 403, response.text
        assert response.json()["error"]["code"] == "forbidden"


def test_a_platform_admin_reads_any_tenant_or_all(client: TestClient[Any]) -> None:
    admin = bearer(ADMIN_KEY)
    alpha = client.get(
        "/api/v1/usage", params={**NOVEMBER, "tenant": "alpha"}, headers=admin
    ).json()
    assert alpha["totals"]["amounts"][GPU_HOURS] == "21.5"
    every = client.get(
        "/api/v1/usage", params={**NOVEMBER, "tenant": "*", "group_by": "tenant"}, headers=admin
    ).json()
    assert every["tenant"] is None
    assert [(r["group"]["tenant"], r["amounts"][GPU_HOURS]) for r in every["rows"]] == [
        ("alpha", "21.5"),
        ("beta", "7777"),
    ]
    named = client.get("/api/v1/usage", params=NOVEMBER, headers=admin)
    assert named.status_code == 400 and "tenant" in named.json()["error"]["message"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"per": "year"}, "per"),
        ({"per": ""}, "per"),
        ({"group_by": "colour"}, "group_by"),
        ({"group_by": "queue,queue"}, "group_by"),
        ({"group_by": "a,b,c,d,e,f"}, "group_by"),
        ({"group_by": "queue;drop"}, "group_by"),
        ({"group_by": ""}, "group_by"),
        ({"month": "2026-13"}, "month"),
        ({"month": "2026-00"}, "month"),
        ({"month": "0000-01"}, "month"),
        ({"month": "November"}, "month"),
        ({"month": "2026-11", "start": "2026-11-01"}, "month"),
        ({"per": "day", "start": "2025-01-01", "end": "2026-01-02"}, "366 days"),
        ({"per": "day", "start": "2026-11-02", "end": "2026-11-01"}, "start"),
        ({"per": "day", "tenant": "Bad Name"}, "tenant"),
        ({"tenant": "*"}, "tenant"),  # the daily usage view is one tenant's
    ],
)
def test_bad_report_parameters_get_400(
    client: TestClient[Any], params: dict[str, str], field: str
) -> None:
    response = client.get("/api/v1/usage", params=params, headers=bearer(key_for(client, "alpha")))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and field in error["message"], error


def test_a_report_too_large_is_refused_not_truncated(
    client: TestClient[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import gateway.usage.controllers as controllers

    alpha = bearer(key_for(client, "alpha"))
    monkeypatch.setattr(controllers, "MAX_ROWS", 3)
    daily = {**NOVEMBER, "per": "day"}
    response = client.get("/api/v1/usage", params=daily, headers=alpha)
    assert response.status_code == 400 and response.json()["error"]["code"] == "report_too_large"
    assert client.get("/api/v1/usage", params=NOVEMBER, headers=alpha).status_code == 200
    monkeypatch.setattr(controllers, "MAX_READ", 2)
    response = client.get("/api/v1/usage", params=NOVEMBER, headers=alpha)
    assert response.status_code == 400 and response.json()["error"]["code"] == "report_too_large"
