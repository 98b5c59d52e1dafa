"""Concurrent submissions under one Idempotency-Key, on SQLite and PostgreSQL: one
workload is created, the others get it (same body) or a 409 (another body), never a
500. A barrier holds every request after its look-up for an earlier submission until
all have looked, so all of them really insert at once, as racing clients can."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from sqlmodel import select

import tenants.services.workloads as workload_service
from gateway.app import create_app
from gateway.settings import DatabaseSettings, Settings
from tenants import Database, parse_config
from tenants.errors import ConflictError
from tenants.models import AuditEntry, WorkloadRow
from tenants.services import apply_config
from tenants.services.workloads import PodSetRequest, WorkloadSubmission, submit_workload
from tests.conftest import ADMIN_KEY
from tests.gateway.test_workload_api import CONFIG, workload
from tests.support.postgres import create_database
from tests.support.serve import serving

RACERS = 8


def hold_lookups(monkeypatch: pytest.MonkeyPatch, racers: int) -> None:
    """The first ``racers`` look-ups by key find nothing until all have been made."""
    barrier = asyncio.Barrier(racers)
    lookup: Callable[..., Any] = workload_service._by_idempotency_key
    calls = 0

    async def held(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls <= racers:
            await barrier.wait()
            return None
        return await lookup(*args)

    monkeypatch.setattr(workload_service, "_by_idempotency_key", held)


def submission(command: str = "true") -> WorkloadSubmission:
    return WorkloadSubmission(
        name="train",
        queue="team-a",
        pod_sets=(PodSetRequest("workers", 1, {"nvidia.com/gpu": "1"}),),
        max_runtime_seconds=60,
        command=(command,),
    )


async def test_racing_submissions_create_one_workload(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with database.session() as session:
        await apply_config(session, parse_config(CONFIG), actor="test")
    hold_lookups(monkeypatch, RACERS)

    async def submit(command: str) -> tuple[WorkloadRow, bool] | ConflictError:
        try:
            async with database.session() as session:
                return await submit_workload(
                    session, "alpha", submission(command), actor="t", idempotency_key="k1"
                )
        except ConflictError as err:
            return err

    # Half ask the same, half something else under the same key.
    outcomes = await asyncio.gather(*(submit("true" if i % 2 else "false") for i in range(RACERS)))
    created = [o for o in outcomes if isinstance(o, tuple) and o[1]]
    assert len(created) == 1
    winner = created[0][0]
    for command, outcome in zip(("false", "true") * RACERS, outcomes, strict=False):
        if command == winner.spec["job"]["command"][0]:
            assert isinstance(outcome, tuple) and outcome[0].id == winner.id
        else:
            assert isinstance(outcome, ConflictError)
    async with database.session() as session:
        rows = (await session.exec(select(WorkloadRow))).all()
        audited = (
            await session.exec(select(AuditEntry).where(AuditEntry.kind == "workload"))
        ).all()
    assert [r.id for r in rows] == [winner.id]
    assert [a.name for a in audited] == [winner.id]  # the losers' entries rolled back too


@pytest.fixture(params=["sqlite", "postgresql"])
async def gateway_url(request: pytest.FixtureRequest, settings: Settings) -> AsyncIterator[str]:
    if request.param == "postgresql":
        url = await create_database(request.getfixturevalue("postgres"))
        settings = dataclasses.replace(settings, database=DatabaseSettings(url=url))
    async with serving(create_app(settings)) as base:
        yield base


async def test_racing_http_submissions_get_the_winner_or_a_409(
    gateway_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with httpx.AsyncClient(base_url=gateway_url, timeout=30) as http:
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        assert (await http.post("/api/v1/admin/config", json=CONFIG, headers=admin)).is_success
        made = await http.post(
            "/api/v1/admin/tenants/alpha/keys", json={"principal": "bot"}, headers=admin
        )
        headers = {"Authorization": f"Bearer {made.json()['token']}", "Idempotency-Key": "r-1"}
        hold_lookups(monkeypatch, RACERS)
        bodies = [workload("same") if i % 2 else workload("other") for i in range(RACERS)]
        answers = await asyncio.gather(
            *(http.post("/api/v1/workloads", json=body, headers=headers) for body in bodies)
        )
        statuses = sorted(a.status_code for a in answers)
        assert statuses.count(201) == 1, [a.text for a in answers]
        winner = next(a.json() for a in answers if a.status_code == 201)
        for body, answer in zip(bodies, answers, strict=True):
            if body["name"] == winner["name"]:
                assert answer.status_code in (200, 201) and answer.json()["id"] == winner["id"]
            else:
                assert answer.status_code == 409
                assert answer.json()["error"]["code"] == "conflict"
        listed = await http.get("/api/v1/workloads", headers=headers)
        assert [w["id"] for w in listed.json()["items"]] == [winner["id"]]
