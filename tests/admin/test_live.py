"""Live state: the queues and cohorts as the engine holds them after an admission pass
(usage, borrowed, lent, pending, budgets), and the event stream over real HTTP."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from gateway.admin.live import GAP_WAIT, _page, _Sequence
from gateway.admission import AdmissionLoop
from gateway.admission.snapshot import read_snapshot
from gateway.admission.state import LiveBoard, amount, summarize
from gateway.app import create_app
from gateway.settings import InferenceSettings, Settings
from quota import QuotaEngine
from quota.config import parse_quota_config
from quota.model import Admission, PodSet, PodSetAssignment, Workload
from quota.resources import FlavorResource
from quota.tree import available
from tenants import Database, parse_config
from tenants.services import apply_config
from tenants.services.workloads import PodSetRequest, WorkloadSubmission, submit_workload
from tests.conftest import ADMIN_KEY
from tests.support.serve import serving

GPU = "nvidia.com/gpu"
GPU_HOURS = "nvidia.com/gpu-hours"


def queue(name: str, budget: bool = False) -> dict[str, Any]:
    quotas: dict[str, Any] = {GPU: {"nominal": 4}}
    if budget:
        quotas[GPU_HOURS] = {"nominal": 100}
    return {
        "name": name,
        "cohort": "research",
        "resource_groups": [
            {
                "resources": [GPU, GPU_HOURS] if budget else [GPU],
                "flavors": [{"name": "h100", "quotas": quotas}],
            }
        ],
    }


CONFIG: dict[str, Any] = {
    "flavors": ["h100"],
    "cohorts": [{"name": "research"}],
    "cluster_queues": [queue("team-a", budget=True), queue("team-b")],
    "tenants": [
        {"name": "alpha", "queues": ["team-a"]},
        {"name": "beta", "queues": ["team-b"]},
    ],
}


def job(name: str, queue: str, gpus: int) -> WorkloadSubmission:
    return WorkloadSubmission(
        name=name,
        queue=queue,
        priority=0,
        pod_sets=(PodSetRequest("main", 1, {GPU: str(gpus)}),),
        max_runtime_seconds=3600,
        command=("/usr/bin/python3", "-c", "pass"),
    )


async def submit(database: Database, tenant: str, submission: WorkloadSubmission) -> str:
    async with database.session() as session:
        row, _ = await submit_workload(session, tenant, submission, actor="test")
    return row.id


async def test_usage_borrowed_lent_and_pending_are_the_engines(database: Database) -> None:
    async with database.session() as session:
        await apply_config(session, parse_config(CONFIG), actor="test")
    big = await submit(database, "alpha", job("big", "team-a", 6))  # borrows 2 of team-b's
    small = await submit(database, "beta", job("small", "team-b", 1))
    waiting = await submit(database, "alpha", job("waits", "team-a", 4))  # 1 is left
    later = await submit(database, "alpha", job("waits-too", "team-a", 4))
    board = LiveBoard(database)
    loop = AdmissionLoop(database, board=board)
    result = await loop.run_pass()
    assert sorted(result.admitted) == sorted([big, small])

    summary = await board.current()
    assert summary.source == "leader"
    fr = FlavorResource("h100", GPU)
    a = {(lv.flavor, lv.resource): lv for lv in summary.queues["team-a"].levels}[("h100", GPU)]
    b = {(lv.flavor, lv.resource): lv for lv in summary.queues["team-b"].levels}[("h100", GPU)]
    assert (amount(GPU, a.nominal), amount(GPU, a.usage)) == (4, 6)
    assert (amount(GPU, a.borrowed), amount(GPU, a.lent)) == (2, 0)
    assert (amount(GPU, b.nominal), amount(GPU, b.usage)) == (4, 1)
    assert (amount(GPU, b.borrowed), amount(GPU, b.lent)) == (0, 2)

    # The same numbers from a snapshot of the database (a replica that does not lead),
    # and the engine's own tree agrees: what team-b may still take is its nominal less
    # its usage less what it lends.
    replica = await LiveBoard(database).current()
    assert replica.source == "snapshot"
    assert replica.queues == summary.queues
    assert replica.cohorts == summary.cohorts
    snapshot_engine = await _engine(database)
    team_b = snapshot_engine.state.queues["team-b"]
    assert team_b.usage[fr] == b.usage
    assert available(team_b, fr) == b.nominal - b.usage - b.lent
    assert snapshot_engine.state.queues["team-a"].usage[fr] == a.usage

    assert summary.queues["team-a"].admitted == 1
    assert summary.queues["team-a"].pending == 2
    oldest = summary.queues["team-a"].oldest_pending
    assert oldest is not None and oldest.id == waiting and oldest.id != later
    assert summary.queues["team-b"].pending == 0
    assert summary.queues["team-b"].oldest_pending is None

    # The budget, as the engine counts it: nothing charged yet, the running workload's
    # 6 GPUs x 1 h committed (less if the month ends within the hour).
    hours = {(lv.flavor, lv.resource): lv for lv in summary.queues["team-a"].levels}[
        ("h100", GPU_HOURS)
    ]
    budgets = snapshot_engine.budgets()["team-a"][FlavorResource("h100", GPU_HOURS)]
    assert (hours.charged, hours.committed) == budgets
    assert hours.charged == 0 and hours.committed is not None
    assert 0 < amount(GPU_HOURS, hours.committed) <= 6

    cohort = summary.cohorts["research"]
    assert cohort.queues == ("team-a", "team-b")
    assert (cohort.admitted, cohort.pending) == (2, 2)
    assert cohort.oldest_pending == oldest
    total = {(lv.flavor, lv.resource): lv for lv in cohort.levels}[("h100", GPU)]
    assert amount(GPU, total.usage) == 7 and total.subtree_nominal == 8000
    assert (total.borrowed, total.lent) == (0, 0)  # a root borrows from no one
    cohort_hours = {(lv.flavor, lv.resource): lv for lv in cohort.levels}[("h100", GPU_HOURS)]
    assert (cohort_hours.charged, cohort_hours.committed) == (hours.charged, hours.committed)


async def _engine(database: Database) -> QuotaEngine:
    snapshot = await read_snapshot(database)
    engine, _ = snapshot.engine()
    return engine


# -- over HTTP ---------------------------------------------------------------------------


@dataclasses.dataclass
class Gateway:
    url: str
    http: httpx.AsyncClient

    async def call(self, token: str | None, method: str, path: str, body: Any = None) -> Any:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return await self.http.request(method, path, json=body, headers=headers)

    async def token(self, tenant: str, principal: str, roles: list[str]) -> str:
        made = await self.call(
            ADMIN_KEY,
            "POST",
            f"/api/v1/admin/tenants/{tenant}/keys",
            {"principal": principal, "roles": roles},
        )
        assert made.status_code == 201, made.text
        token: str = made.json()["token"]
        return token


@asynccontextmanager
async def gateway(settings: Settings) -> AsyncIterator[Gateway]:
    settings = dataclasses.replace(settings, inference=InferenceSettings(health_interval=3600))
    async with (
        serving(create_app(settings)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        api = Gateway(url, http)
        applied = await api.call(ADMIN_KEY, "POST", "/api/v1/admin/config", CONFIG)
        assert applied.status_code == 201, applied.text
        yield api


def workload(name: str, gpus: int = 1) -> dict[str, Any]:
    return {
        "name": name,
        "queue": "team-a",
        "pod_sets": [{"name": "w", "count": 1, "requests": {GPU: gpus}}],
        "max_runtime_seconds": 60,
        "job": {"command": ["/usr/bin/python3", "-c", "print('ok')"]},
    }


async def read_events(
    response: httpx.Response, until: str, workload_id: str
) -> list[tuple[str, str, dict[str, Any]]]:
    """(id, event, data) of each event read until ``until`` for ``workload_id``."""
    seen: list[tuple[str, str, dict[str, Any]]] = []
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line.startswith(":") or line.startswith("retry:"):
            continue
        if line:
            name, _, value = line.partition(": ")
            fields[name] = value
            continue
        if "event" in fields:
            data = json.loads(fields["data"])
            seen.append((fields["id"], fields["event"], data))
            if fields["event"] == until and data.get("workload") == workload_id:
                return seen
        fields = {}
    raise AssertionError(f"the stream ended before {until}: {seen}")


async def test_events_stream_an_admission_and_resume_from_last_event_id(
    settings: Settings,
) -> None:
    async with gateway(settings) as api:
        member = await api.token("alpha", "ann", ["member"])
        async with asyncio.timeout(60):
            async with api.http.stream(
                "GET",
                "/api/v1/admin/events",
                headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            ) as stream:
                assert stream.status_code == 200
                assert stream.headers["content-type"].startswith("text/event-stream")
                made = await api.call(member, "POST", "/api/v1/workloads", workload("first"))
                assert made.status_code in (201, 202), made.text
                wid = made.json()["id"]
                seen = await read_events(stream, "admitted", wid)
            types = [event for _, event, data in seen if data.get("workload") == wid]
            assert types[:2] == ["submitted", "admitted"]
            submitted = next(i for i, e, d in seen if e == "submitted" and d["workload"] == wid)
            admitted = next(d for _, e, d in seen if e == "admitted" and d["workload"] == wid)
            assert admitted["queue"] == "team-a" and admitted["tenant"] == "alpha"
            assert admitted["detail"]["flavors"] == ["h100"]

            # Resumed after the submission: the admission comes next, not the submission,
            # and the stream goes on to the job's end.
            async with api.http.stream(
                "GET",
                "/api/v1/admin/events",
                headers={"Authorization": f"Bearer {ADMIN_KEY}", "Last-Event-ID": submitted},
            ) as resumed:
                again = await read_events(resumed, "finished", wid)
            mine = [e for _, e, d in again if d.get("workload") == wid]
            assert mine[0] == "admitted" and mine[-1] == "finished", mine
            ids = [tuple(map(int, i.split("-"))) for i, _, _ in again]
            assert ids == sorted(ids) and ids[0] > tuple(map(int, submitted.split("-")))

            bad = await api.http.get(
                "/api/v1/admin/events",
                headers={"Authorization": f"Bearer {ADMIN_KEY}", "Last-Event-ID": "yesterday"},
            )
            assert bad.status_code == 400, bad.text


async def test_config_changes_are_streamed(settings: Settings) -> None:
    async with (
        gateway(settings) as api,
        asyncio.timeout(60),
        api.http.stream(
            "GET",
            "/api/v1/admin/events",
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        ) as stream,
    ):
        changed = json.loads(json.dumps(CONFIG))
        changed["cluster_queues"][1]["resource_groups"][0]["flavors"][0]["quotas"][GPU] = {
            "nominal": 8
        }
        applied = await api.call(ADMIN_KEY, "POST", "/api/v1/admin/config", changed)
        assert applied.status_code == 201, applied.text
        fields: dict[str, str] = {}
        async for line in stream.aiter_lines():
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if fields.get("event") == "config":
                data = json.loads(fields["data"])
                if (data["kind"], data["name"]) == ("cluster_queue", "team-b"):
                    assert data["action"] == "update"
                    break
            fields = {}
        else:
            raise AssertionError("no config event for team-b")


async def test_the_stream_ends_cleanly_when_the_server_stops(settings: Settings) -> None:
    lines: list[str] = []

    async def read(stream: httpx.Response) -> None:
        async for line in stream.aiter_lines():
            lines.append(line)

    # The stream's client outlives the server, so only the server can end the stream.
    async with httpx.AsyncClient(timeout=30) as outside, AsyncExitStack() as stack:
        async with gateway(settings) as api:
            stream = await stack.enter_async_context(
                outside.stream(
                    "GET",
                    f"{api.url}/api/v1/admin/events",
                    params={"heartbeat": "1"},
                    headers={"Authorization": f"Bearer {ADMIN_KEY}"},
                )
            )
            assert stream.status_code == 200
            reader = asyncio.create_task(read(stream))
            await asyncio.sleep(2.5)
            # Leaving `gateway` stops the server, which waits at most 15 s for responses.
        # The stream ended as a complete response (a cut one raises), and at once.
        await asyncio.wait_for(reader, timeout=5)
    assert ": keep-alive" in lines


async def test_queues_and_cohorts_over_http(settings: Settings) -> None:
    async with gateway(settings) as api:
        member = await api.token("alpha", "ann", ["member"])
        boss = await api.token("alpha", "ada", ["tenant-admin"])
        made = await api.call(member, "POST", "/api/v1/workloads", workload("wide", gpus=16))
        assert made.status_code in (201, 202), made.text  # never fits: it waits
        wid = made.json()["id"]
        async with asyncio.timeout(30):
            while True:
                got = await api.call(ADMIN_KEY, "GET", "/api/v1/admin/queues")
                assert got.status_code == 200, got.text
                # The config applied a moment ago shows from the next admission pass.
                team_a = next((q for q in got.json()["items"] if q["name"] == "team-a"), {})
                if team_a.get("pending") == 1:
                    break
                await asyncio.sleep(0.2)
        assert team_a["oldest_pending"]["id"] == wid
        assert team_a["tenants"] == ["alpha"] and team_a["cohort"] == "research"
        gpu = next(r for r in team_a["resources"] if r["resource"] == GPU)
        assert gpu == {
            "flavor": "h100",
            "resource": GPU,
            "nominal": 4,
            "usage": 0,
            "borrowed": 0,
            "lent": 0,
            "borrowing_limit": None,
            "lending_limit": None,
        }
        hours = next(r for r in team_a["resources"] if r["resource"] == GPU_HOURS)
        assert (hours["nominal"], hours["charged"], hours["committed"]) == (100, 0, 0)

        page = await api.call(ADMIN_KEY, "GET", "/api/v1/admin/queues?limit=1")
        assert [q["name"] for q in page.json()["items"]] == ["team-a"]
        cursor = page.json()["next_cursor"]
        rest = await api.call(ADMIN_KEY, "GET", f"/api/v1/admin/queues?limit=1&cursor={cursor}")
        assert [q["name"] for q in rest.json()["items"]] == ["team-b"]
        assert rest.json()["next_cursor"] is None

        inside = await api.call(ADMIN_KEY, "GET", "/api/v1/admin/queues?cohort=research")
        assert [q["name"] for q in inside.json()["items"]] == ["team-a", "team-b"]
        elsewhere = await api.call(ADMIN_KEY, "GET", "/api/v1/admin/queues?cohort=other")
        assert elsewhere.json()["items"] == []

        cohorts = await api.call(ADMIN_KEY, "GET", "/api/v1/admin/cohorts")
        assert cohorts.status_code == 200, cohorts.text
        (research,) = cohorts.json()["items"]
        assert research["queues"] == ["team-a", "team-b"] and research["pending"] == 1
        total = next(r for r in research["resources"] if r["resource"] == GPU)
        assert total["subtree_nominal"] == 8

        # A tenant admin sees its own tenant's queues only, and no cohorts.
        own = await api.call(boss, "GET", "/api/v1/admin/queues")
        assert own.status_code == 200, own.text
        assert [q["name"] for q in own.json()["items"]] == ["team-a"]
        assert (await api.call(boss, "GET", "/api/v1/admin/cohorts")).status_code == 403

        # Bad paging input is a 400, not a 500.
        for query in ("limit=0", "limit=100000", "cursor=NOT%20A%20NAME"):
            got = await api.call(ADMIN_KEY, "GET", f"/api/v1/admin/queues?{query}")
            assert got.status_code == 400, (query, got.text)


@pytest.mark.parametrize(
    "path", ["/api/v1/admin/queues", "/api/v1/admin/cohorts", "/api/v1/admin/events"]
)
async def test_non_admins_are_refused(settings: Settings, path: str) -> None:
    async with gateway(settings) as api:
        member = await api.token("alpha", "ann", ["member"])
        assert (await api.call(None, "GET", path)).status_code == 401
        refused = await api.call(member, "GET", path)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "forbidden"


# -- the arithmetic, on the engine alone ----------------------------------------------


def _gpu_queue(name: str, cohort: str, nominal: int = 4) -> dict[str, Any]:
    quotas = {GPU: {"nominal": nominal}}
    return {
        "name": name,
        "cohort": cohort,
        "resource_groups": [{"resources": [GPU], "flavors": [{"name": "h100", "quotas": quotas}]}],
    }


def _running(engine: QuotaEngine, name: str, queue: str, gpus: int) -> None:
    engine.add_admitted(
        Workload(name, queue, (PodSet("main", 1, {GPU: gpus * 1000}),)),
        Admission(queue, (PodSetAssignment("main", 1, {GPU: "h100"}),)),
    )


def _gpus(levels: Any) -> tuple[Any, ...]:
    (level,) = [lv for lv in levels if lv.resource == GPU]
    return tuple(amount(GPU, v) for v in (level.nominal, level.usage, level.borrowed, level.lent))


def test_lending_in_a_nested_tree_comes_from_the_nearest_lenders_first() -> None:
    config = parse_quota_config(
        {
            "flavors": ["h100"],
            "cohorts": [
                {
                    "name": "org",
                    "resource_groups": [
                        {
                            "resources": [GPU],
                            "flavors": [{"name": "h100", "quotas": {GPU: {"nominal": 2}}}],
                        }
                    ],
                },
                {"name": "research", "parent": "org"},
            ],
            "cluster_queues": [
                _gpu_queue("team-a", "research"),
                _gpu_queue("team-b", "research"),
                _gpu_queue("team-c", "org"),
            ],
        }
    )
    engine = QuotaEngine(config)
    _running(engine, "w", "team-a", 10)  # 6 above its nominal
    summary = summarize(engine, {}, as_of=engine.now, source="test", opened={})
    # (nominal, usage, borrowed, lent)
    assert _gpus(summary.queues["team-a"].levels) == (4, 10, 6, 0)
    # team-b lends all of its 4 within research; research borrows the other 2 from org,
    # which gives its own quota first: team-c lends nothing.
    assert _gpus(summary.queues["team-b"].levels) == (4, 0, 0, 4)
    assert _gpus(summary.cohorts["research"].levels) == (0, 10, 2, 0)
    assert _gpus(summary.queues["team-c"].levels) == (4, 0, 0, 0)
    # What the tree still gives team-c: its nominal plus the pool, less what was taken.
    fr = FlavorResource("h100", GPU)
    assert available(engine.state.queues["team-c"], fr) == 4_000


def test_a_thousand_queues_page_by_name() -> None:
    config = parse_quota_config(
        {
            "flavors": ["h100"],
            "cluster_queues": [_gpu_queue(f"q-{i:04d}", "all") for i in range(1000)],
        }
    )
    summary = summarize(QuotaEngine(config), {}, as_of=datetime.now(UTC), source="t", opened={})
    names, cursor, pages = [], None, 0
    while True:
        page, cursor = _page(sorted(summary.queues), cursor, 500)
        names += page
        pages += 1
        if cursor is None:
            break
    assert names == sorted(summary.queues) and len(names) == 1000 and pages == 2


def test_a_missing_event_id_holds_later_ones_back_until_it_is_taken_for_a_rollback() -> None:
    sequence = _Sequence(10)
    assert sequence.ready([11, 12, 14, 15], now=100.0) == 2  # 13 may still commit
    sequence.last = 12
    assert sequence.ready([14, 15], now=100.0 + GAP_WAIT / 2) == 0
    assert sequence.ready([13, 14, 15], now=100.0 + GAP_WAIT / 2) == 3  # it did
    sequence.last = 15
    assert sequence.ready([17], now=200.0) == 0
    assert sequence.ready([17], now=200.0 + GAP_WAIT) == 1  # 16 never will


async def test_a_tenant_admin_streams_its_own_tenants_events_only(settings: Settings) -> None:
    async with gateway(settings) as api, asyncio.timeout(60):
        ann = await api.token("alpha", "ann", ["member"])
        bob = await api.token("beta", "bob", ["member"])
        beta_admin = await api.token("beta", "bea", ["tenant-admin"])
        async with api.http.stream(
            "GET", "/api/v1/admin/events", headers={"Authorization": f"Bearer {beta_admin}"}
        ) as stream:
            assert stream.status_code == 200
            first = await api.call(ann, "POST", "/api/v1/workloads", workload("alphas"))
            assert first.status_code in (201, 202), first.text
            theirs = dict(workload("betas"), queue="team-b")
            second = await api.call(bob, "POST", "/api/v1/workloads", theirs)
            assert second.status_code in (201, 202), second.text
            seen = await read_events(stream, "admitted", second.json()["id"])
        # alpha's workload was submitted first, yet beta's admin saw none of it.
        assert {d["tenant"] for _, _, d in seen} == {"beta"}
        assert {d["workload"] for _, _, d in seen} == {second.json()["id"]}


async def test_the_leaders_state_is_served_until_it_is_stale_then_a_snapshot(
    database: Database,
) -> None:
    async with database.session() as session:
        await apply_config(session, parse_config(CONFIG), actor="test")
    clock = [0.0]
    board = LiveBoard(database, max_age=2.0, leader_max_age=10.0, monotonic=lambda: clock[0])
    await AdmissionLoop(database, board=board).run_pass()
    assert (await board.current()).source == "leader"
    clock[0] = 9.0  # a slow pass: the last one's state still stands
    assert (await board.current()).source == "leader"
    clock[0] = 10.5  # no pass for too long (leadership lost): read from the database
    first = await board.current()
    assert first.source == "snapshot"
    clock[0] = 12.0
    assert await board.current() is first  # one read serves every request for 2 s
    clock[0] = 13.0
    assert await board.current() is not first


async def test_a_tenant_cannot_open_more_event_streams_than_allowed(settings: Settings) -> None:
    server = dataclasses.replace(settings.server, event_streams_per_tenant=2, event_streams=3)
    limited = dataclasses.replace(settings, server=server)
    async with gateway(limited) as api, AsyncExitStack() as open_:
        beta = [await api.token("beta", f"bea-{i}", ["tenant-admin"]) for i in range(3)]
        alpha = await api.token("alpha", "al", ["tenant-admin"])

        async def stream(token: str) -> httpx.Response:
            return await open_.enter_async_context(
                api.http.stream(
                    "GET", "/api/v1/admin/events", headers={"Authorization": f"Bearer {token}"}
                )
            )

        # A member of beta, refused the stream, holds none of beta's places.
        member = await api.token("beta", "bob", ["member"])
        for _ in range(3):
            assert (await stream(member)).status_code == 403
        # Two streams of beta's, on two keys: its limit counts the tenant, not the key.
        first = await stream(beta[0])
        assert (first.status_code, (await stream(beta[1])).status_code) == (200, 200)
        refused = await stream(beta[2])
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "30"
        error = json.loads(await refused.aread())["error"]
        assert error["code"] == "too_many_streams"
        assert "tenant 'beta' has already 2 event streams open" in error["message"]
        # alpha takes the third place of all tenants', then none is left for a fourth...
        assert (await stream(alpha)).status_code == 200
        assert (await stream(alpha)).status_code == 429
        # ...while the platform's admins have places of their own.
        assert (await stream(ADMIN_KEY)).status_code == 200
        # A stream closed gives its place back (once the server has seen the client go).
        await first.aclose()
        async with asyncio.timeout(20):
            while True:
                retry = await open_.enter_async_context(
                    api.http.stream(
                        "GET",
                        "/api/v1/admin/events",
                        headers={"Authorization": f"Bearer {beta[2]}"},
                    )
                )
                if retry.status_code == 200:
                    break
                await asyncio.sleep(0.2)
