"""`GET /api/v1/usage` end to end: a tenant's own usage per UTC day and model, the
admin's view of any tenant, and 4xx (never 500) for bad input."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import Settings
from tenants import Database
from tenants.services.usage import UsageRecord, insert_usage
from tests.conftest import ADMIN_KEY
from tests.gateway.test_workload_api import bearer, key_for

CONFIG = {
    "flavors": ["h100"],
    "cluster_queues": [
        {
            "name": q,
            "resource_groups": [
                {
                    "resources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "h100", "quotas": {"nvidia.com/gpu": {"nominal": 4}}}],
                }
            ],
        }
        for q in ("team-a", "team-b")
    ],
    "tenants": [{"name": "alpha", "queues": ["team-a"]}, {"name": "beta", "queues": ["team-b"]}],
}


def usage(
    tenant: str, model: str, day: date, *, status: int = 200, prompt: int = 10, completion: int = 5
) -> UsageRecord:
    return UsageRecord(
        tenant=tenant,
        principal=f"{tenant}-bot",
        queue="team-a" if tenant == "alpha" else "team-b",
        model=model,
        flavor="h100",
        status=status,
        prompt_tokens=prompt,
        completion_tokens=completion,
        created_at=datetime(day.year, day.month, day.day, 12, tzinfo=UTC),
    )


def store(settings: Settings, records: list[UsageRecord]) -> None:
    """Write records as the recorder would, to the database the app uses (the app
    runs its own event loop, in the test client's thread)."""

    async def write() -> None:
        database = Database(settings.database.url)
        try:
            async with database.session() as session:
                await insert_usage(session, records)
        finally:
            await database.dispose()

    asyncio.run(write())


@pytest.fixture
def today() -> date:
    # Read when the test runs, not at import: a run of the suite may pass midnight.
    return datetime.now(UTC).date()


@pytest.fixture
def client(settings: Settings, today: date) -> Iterator[TestClient[Any]]:
    with TestClient(app=create_app(settings)) as client:
        admin = bearer(ADMIN_KEY)
        assert client.post("/api/v1/admin/config", json=CONFIG, headers=admin).status_code == 201
        yesterday = today - timedelta(days=1)
        store(
            settings,
            [
                usage("alpha", "llama-3-8b", today),
                usage("alpha", "llama-3-8b", today, status=429, prompt=3, completion=0),
                usage("alpha", "mistral-7b", today, prompt=100, completion=40),
                usage("alpha", "llama-3-8b", yesterday),
                usage("alpha", "llama-3-8b", today - timedelta(days=40)),  # before the default
                usage("beta", "llama-3-8b", today, prompt=7777),
            ],
        )
        yield client


def counters(requests: int, errors: int, prompt: int, completion: int) -> dict[str, int]:
    return {
        "requests": requests,
        "errors": errors,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def test_a_member_reads_its_tenants_last_30_days(client: TestClient[Any], today: date) -> None:
    response = client.get("/api/v1/usage", headers=bearer(key_for(client, "alpha")))
    assert response.status_code == 200, response.text
    yesterday = (today - timedelta(days=1)).isoformat()
    assert response.json() == {
        "tenant": "alpha",
        "start": (today - timedelta(days=29)).isoformat(),
        "end": today.isoformat(),
        "days": [
            {"day": yesterday, "model": "llama-3-8b", **counters(1, 0, 10, 5)},
            {"day": today.isoformat(), "model": "llama-3-8b", **counters(2, 1, 13, 5)},
            {"day": today.isoformat(), "model": "mistral-7b", **counters(1, 0, 100, 40)},
        ],
        "totals": counters(4, 1, 123, 50),
    }


def test_period_and_model_filter(client: TestClient[Any], today: date) -> None:
    alpha = bearer(key_for(client, "alpha"))
    start = (today - timedelta(days=60)).isoformat()
    body = client.get(
        "/api/v1/usage", params={"start": start, "model": "llama-3-8b"}, headers=alpha
    ).json()
    assert (body["start"], body["end"]) == (start, today.isoformat())
    assert [d["model"] for d in body["days"]] == ["llama-3-8b"] * 3
    assert body["totals"] == counters(4, 1, 33, 15)
    day = today.isoformat()
    only_today = client.get(
        "/api/v1/usage", params={"start": day, "end": day}, headers=alpha
    ).json()
    assert only_today["totals"] == counters(3, 1, 113, 45)
    unknown = client.get("/api/v1/usage", params={"model": "nope"}, headers=alpha).json()
    assert (unknown["days"], unknown["totals"]) == ([], counters(0, 0, 0, 0))


def test_a_tenant_never_sees_another_tenants_usage(client: TestClient[Any]) -> None:
    beta = bearer(key_for(client, "beta", ["tenant-admin"]))
    own = client.get("/api/v1/usage", headers=beta).json()
    assert own["tenant"] == "beta" and own["totals"] == counters(1, 0, 7777, 5)
    assert client.get("/api/v1/usage", params={"tenant": "beta"}, headers=beta).status_code == 200
    other = client.get("/api/v1/usage", params={"tenant": "alpha"}, headers=beta)
    assert other.status_code == 403 and other.json()["error"]["code"] == "forbidden"


def test_a_platform_admin_names_the_tenant(client: TestClient[Any]) -> None:
    admin = bearer(ADMIN_KEY)
    missing = client.get("/api/v1/usage", headers=admin)
    assert missing.status_code == 400 and "tenant" in missing.json()["error"]["message"]
    body = client.get("/api/v1/usage", params={"tenant": "alpha"}, headers=admin).json()
    assert body["tenant"] == "alpha" and body["totals"] == counters(4, 1, 123, 50)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"start": "2026-11-22", "end": "2026-11-21"}, "start"),  # end before start
        ({"start": "2025-01-01", "end": "2026-01-02"}, "366 days"),  # 367 days
        ({"start": "1970-01-01", "end": "2999-12-31"}, "366 days"),
        ({"start": "yesterday"}, "start"),
        ({"end": "2026-02-30"}, "end"),
        ({"end": "0001-01-01"}, "end"),  # the default start would be before year 1
        ({"start": "0001-01-01", "end": "0001-01-02"}, "start"),
        ({"start": "9999-12-30", "end": "9999-12-31"}, "start"),
        ({"start": "9999-12-31"}, "start"),
        ({"start": "0000-01-01"}, "start"),
        ({"start": "10000-01-01"}, "start"),
        ({"start": "2026-11-01T00:00:00"}, "start"),  # a datetime, naive
        ({"end": "2026-11-01T00:00:00+00:00"}, "end"),
        ({"end": "1795612979"}, "end"),
        ({"model": "m" * 129}, "model"),
        ({"model": ""}, "model"),
        ({"model": "a\x00b"}, "model"),  # PostgreSQL's text cannot hold NUL
        ({"tenant": "Not A Tenant"}, "tenant"),
    ],
)
def test_bad_queries_get_400(client: TestClient[Any], params: dict[str, str], field: str) -> None:
    response = client.get("/api/v1/usage", params=params, headers=bearer(key_for(client, "alpha")))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and field in error["message"]


def test_odd_bytes_in_the_query_get_400(client: TestClient[Any]) -> None:
    alpha = bearer(key_for(client, "alpha"))
    for query in ("start=%ff%fe", "end=%00", "model=%ff", "tenant=%c3%28"):
        response = client.get(f"/api/v1/usage?{query}", headers=alpha)
        assert response.status_code == 400, (query, response.text)
        assert response.json()["error"]["code"] == "invalid_request"


def test_a_year_is_allowed_and_callers_must_authenticate(client: TestClient[Any]) -> None:
    alpha = bearer(key_for(client, "alpha"))
    leap_year = {"start": "2028-01-01", "end": "2028-12-31"}  # 366 days
    assert client.get("/api/v1/usage", params=leap_year, headers=alpha).status_code == 200
    assert client.get("/api/v1/usage").status_code == 401
