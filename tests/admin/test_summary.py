"""``GET /api/v1/admin/summary``: the platform's totals are the queues' own figures
added up (every page of ``/queues``), plus the cohorts' own quota in the capacity."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gateway.admin.summary import summarize_platform
from gateway.admission import AdmissionLoop
from gateway.admission.state import LiveBoard
from gateway.settings import Settings
from tenants import Database, parse_config
from tenants.models import UsageRecordRow
from tenants.models._base import utcnow
from tenants.services import apply_config
from tenants.services.usage import tenant_tokens_since
from tests.admin.test_live import GPU, job, submit
from tests.conftest import ADMIN_KEY
from tests.support.serve import serving

CPU = "cpu"


def _queue(name: str, cohort: str, gpus: int, cpus: int | None = None) -> dict[str, Any]:
    quotas: dict[str, Any] = {GPU: {"nominal": gpus}}
    resources = [GPU]
    if cpus is not None:
        quotas[CPU] = {"nominal": cpus}
        resources.append(CPU)
    return {
        "name": name,
        "cohort": cohort,
        "resource_groups": [
            {"resources": resources, "flavors": [{"name": "h100", "quotas": quotas}]}
        ],
    }


# Seven queues in two cohorts under a root that holds 3 GPUs of its own.
CONFIG: dict[str, Any] = {
    "flavors": ["h100"],
    "cohorts": [
        {
            "name": "org",
            "resource_groups": [
                {"resources": [GPU], "flavors": [{"name": "h100", "quotas": {GPU: {"nominal": 3}}}]}
            ],
        },
        {"name": "vision", "parent": "org"},
        {"name": "speech", "parent": "org"},
    ],
    "cluster_queues": [
        _queue("q-1", "vision", 4, cpus=16),
        _queue("q-2", "vision", 4),
        _queue("q-3", "vision", 2),
        _queue("q-4", "speech", 1, cpus=8),
        _queue("q-5", "speech", 1),
        _queue("q-6", "speech", 8),
        _queue("q-7", "speech", 0),
    ],
    "tenants": [
        {"name": "alpha", "queues": ["q-1", "q-2", "q-3"]},
        {"name": "beta", "queues": ["q-4", "q-5", "q-6", "q-7"]},
        {"name": "gamma", "queues": []},
    ],
}


async def test_the_totals_are_the_queues_figures_added_up(database: Database) -> None:
    async with database.session() as session:
        await apply_config(session, parse_config(CONFIG), actor="test")
    await submit(database, "alpha", job("wide", "q-1", 9))  # borrows 5
    await submit(database, "alpha", job("one", "q-2", 1))
    await submit(database, "beta", job("two", "q-4", 2))  # borrows 1
    await submit(database, "beta", job("huge", "q-6", 50))  # never fits: waits
    await submit(database, "beta", job("more", "q-5", 40))  # waits too
    board = LiveBoard(database)
    await AdmissionLoop(database, board=board).run_pass()
    live = await board.current()

    summary = summarize_platform(live)
    assert (summary.tenants, summary.queues, summary.cohorts, summary.flavors) == (3, 7, 3, 1)
    assert (summary.admitted, summary.pending, summary.inadmissible) == (3, 2, 0)
    gpus = {(r.flavor, r.resource): r for r in summary.resources}[("h100", GPU)]
    # 20 GPUs of queues and the root's own 3; 12 in use, of which 6 above queues' own.
    assert (gpus.capacity, gpus.usage, gpus.borrowed, gpus.queues) == (23, 12, 6, 7)
    cpus = {(r.flavor, r.resource): r for r in summary.resources}[("h100", CPU)]
    assert (cpus.capacity, cpus.usage, cpus.queues) == (24, 0, 2)
    assert [(q.name, q.pending) for q in summary.most_pending] == [("q-5", 1), ("q-6", 1)]
    assert [q.name for q in summary.most_admitted] == ["q-1", "q-2", "q-4"]
    assert summarize_platform(live) is summary  # once per state


async def test_the_summary_over_http_matches_every_page_of_queues(settings: Settings) -> None:
    import httpx

    from gateway.app import create_app

    async with (
        serving(create_app(settings)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        applied = await http.post("/api/v1/admin/config", json=CONFIG, headers=admin)
        assert applied.status_code == 201, applied.text
        made = await http.post(
            "/api/v1/admin/tenants/beta/keys",
            json={"principal": "bob", "roles": ["member"]},
            headers=admin,
        )
        member = {"Authorization": f"Bearer {made.json()['token']}"}
        body = {
            "name": "waits",
            "queue": "q-6",
            "pod_sets": [{"name": "w", "count": 1, "requests": {GPU: 64}}],
            "max_runtime_seconds": 60,
            "job": {"command": ["/usr/bin/python3", "-c", "pass"]},
        }
        assert (await http.post("/api/v1/workloads", json=body, headers=member)).is_success

        for _ in range(100):  # the leader's next pass takes the config and the workload in
            summary = (await http.get("/api/v1/admin/summary", headers=admin)).json()
            if summary["queues"] == 7 and summary["pending"] == 1:
                break
            await _pause()
        queues: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params = {"limit": "3", **({"cursor": cursor} if cursor else {})}
            page = (await http.get("/api/v1/admin/queues", params=params, headers=admin)).json()
            queues += page["items"]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert len(queues) == summary["queues"] == 7
        assert sum(q["pending"] for q in queues) == summary["pending"] == 1
        assert sum(q["admitted"] for q in queues) == summary["admitted"]
        for total in summary["resources"]:
            levels = [
                level
                for q in queues
                for level in q["resources"]
                if (level["flavor"], level["resource"]) == (total["flavor"], total["resource"])
            ]
            assert total["usage"] == sum(level["usage"] for level in levels)
            assert total["borrowed"] == sum(level["borrowed"] for level in levels)
            assert total["capacity"] == sum(level["nominal"] for level in levels) + (
                3 if total["resource"] == GPU else 0
            )
        assert summary["most_pending"][0]["name"] == "q-6"
        # No inference call yet.
        assert (summary["tokens_last_minute"], summary["top_tenants_last_minute"]) == (0, [])
        # Every tenant's totals: platform admins only.
        assert (await http.get("/api/v1/admin/summary", headers=member)).status_code == 403
        assert (await http.get("/api/v1/admin/summary")).status_code == 401


async def _pause() -> None:
    import asyncio

    await asyncio.sleep(0.1)


def _call(tenant: str, seconds_ago: float, prompt: int, completion: int) -> UsageRecordRow:
    when = utcnow() - timedelta(seconds=seconds_ago)
    return UsageRecordRow(
        tenant=tenant,
        principal="p",
        queue="q",
        model="m",
        flavor="f",
        prompt_tokens=prompt,
        completion_tokens=completion,
        status=200,
        created_at=when,
        day=when.date(),
    )


async def test_the_last_minutes_tokens_are_counted_per_tenant_busiest_first(
    database: Database,
) -> None:
    async with database.session() as session:
        session.add_all(
            [
                _call("alpha", 5, 100, 20),
                _call("alpha", 50, 300, 0),
                _call("beta", 10, 1000, 500),
                _call("gamma", 30, 0, 0),  # a failed call: no tokens, not a busy tenant
                _call("delta", 90, 9999, 9999),  # before the minute
            ]
        )
    since = utcnow() - timedelta(minutes=1)
    async with database.snapshot() as session:
        assert await tenant_tokens_since(session, since) == [("beta", 1500), ("alpha", 420)]
