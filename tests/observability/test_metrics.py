"""GET /metrics: the series move when the gateway serves, refuses and admits; labels
stay bounded whatever paths callers send."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest
from sqlmodel import select

from gateway.admission import AdmissionRuntime
from gateway.admission.state import LiveBoard
from gateway.app import create_app
from gateway.observability import GatewayMetrics, Observability
from gateway.settings import ObservabilitySettings, Settings
from tenants import Database, parse_config
from tenants.models import WorkloadRow
from tenants.services import apply_config
from tenants.services.workloads import PodSetRequest, WorkloadSubmission, submit_workload
from tests.inference.test_v1_api import CHAT, Gateway, running_gateway
from tests.observability.support import samples, value
from tests.support.fake_openai import FakeOpenAI
from tests.support.serve import serving

pytestmark = pytest.mark.integration


@pytest.fixture
async def upstream() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(models=("fake-model", "fake-embed"), completion_tokens=5) as fake:
        yield fake


@pytest.fixture
async def gateway(settings: Settings, upstream: FakeOpenAI) -> AsyncIterator[Gateway]:
    async with running_gateway(settings, upstream, None) as gateway:
        yield gateway


async def scrape(gateway: Gateway) -> str:
    await gateway.settled()
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        answer = await http.get("/metrics")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return answer.text


async def test_an_inference_call_moves_requests_tokens_and_upstream_series(
    gateway: Gateway,
) -> None:
    chat = {"route": "/v1/chat/completions", "method": "POST"}
    before = await scrape(gateway)
    assert value(before, "ignara_http_requests_total", **chat) == 0

    await gateway.client("alpha").chat.completions.create(
        model="fake-model", messages=CHAT, max_tokens=50
    )
    stream = await gateway.client("alpha").chat.completions.create(
        model="fake-model", messages=CHAT, max_tokens=50, stream=True
    )
    async for _ in stream:
        pass
    after = await scrape(gateway)
    assert value(after, "ignara_http_requests_total", status="200", **chat) == 2
    assert value(after, "ignara_http_request_duration_seconds_count", **chat) == 2
    tokens = {"tenant": "alpha", "queue": "team-a", "model": "fake-model"}
    assert value(after, "ignara_tokens_total", direction="input", **tokens) == 6
    assert value(after, "ignara_tokens_total", direction="output", **tokens) == 10
    upstream = f"{gateway.upstream.base_url}"
    (labels, count), *_ = samples(after, "ignara_upstream_request_duration_seconds_count")
    assert labels["model"] == "fake-model" and upstream.startswith(labels["endpoint"].rstrip("/"))
    assert count == 2
    assert value(after, "ignara_time_to_first_token_seconds_count", model="fake-model") == 1
    assert value(after, "ignara_ledger_round_trip_seconds_count", operation="reserve") == 2
    assert value(after, "ignara_ledger_round_trip_seconds_count", operation="settle") == 2
    assert value(after, "ignara_policy_decision_duration_seconds_count") >= 1
    # Litestar's own routes are counted by template too (the scrapes themselves).
    assert value(after, "ignara_http_requests_total", route="/metrics", status="200") >= 1


async def test_a_429_counts_by_level_and_resource(gateway: Gateway) -> None:
    client = gateway.client("tight")  # two requests a minute
    for _ in range(2):
        await client.chat.completions.create(model="fake-model", messages=CHAT, max_tokens=5)
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model="fake-model", messages=CHAT, max_tokens=5)
    text = await scrape(gateway)
    assert (
        value(
            text,
            "ignara_rate_limited_total",
            level="ClusterQueue",
            resource="requests-per-minute",
        )
        == 1
    )
    assert (
        value(text, "ignara_http_requests_total", route="/v1/chat/completions", status="429") == 1
    )


async def test_a_thousand_random_paths_make_one_route_label(gateway: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        for _ in range(1000):
            await http.get(f"/{uuid.uuid4().hex}/{uuid.uuid4().hex[:6]}")
        for _ in range(20):  # a templated route: one label, never the workload id
            await http.get(f"/api/v1/workloads/{uuid.uuid4().hex}")
    text = await scrape(gateway)
    routes = {labels["route"] for labels, _ in samples(text, "ignara_http_requests_total")}
    assert value(text, "ignara_http_requests_total", route="unmatched") == 1000
    assert "/api/v1/workloads/{workload_id}" in routes
    assert all(len(route) < 80 for route in routes)
    assert len(routes) < 10, routes
    assert not any(uuid_like in text for uuid_like in ("api_key", "ign_"))


async def test_metrics_can_ask_for_a_bearer_token(settings: Settings) -> None:
    guarded = dataclasses.replace(
        settings, observability=ObservabilitySettings(metrics_token="scrape-secret-123")
    )
    async with serving(create_app(guarded)) as url, httpx.AsyncClient(base_url=url) as http:
        refused = await http.get("/metrics")
        wrong = await http.get("/metrics", headers={"authorization": "Bearer nope"})
        allowed = await http.get("/metrics", headers={"authorization": "Bearer scrape-secret-123"})
    assert refused.status_code == wrong.status_code == 401
    assert refused.json()["error"]["code"] == "unauthorized"
    assert allowed.status_code == 200 and "ignara_http_requests_total" in allowed.text


async def test_metrics_off_serve_nothing(settings: Settings) -> None:
    off = dataclasses.replace(settings, observability=ObservabilitySettings(metrics=False))
    app = create_app(off)
    assert app.state["services"].observe.metrics is None
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        answer = await http.get("/metrics")
    assert answer.status_code == 404


def test_two_apps_in_one_process_keep_their_own_registries(settings: Settings) -> None:
    first, second = create_app(settings), create_app(settings)
    one = first.state["services"].observe.metrics
    two = second.state["services"].observe.metrics
    one.request("/healthz", "GET", 200, 0.01)
    assert value(one.render(None).decode(), "ignara_http_requests_total") == 1
    assert value(two.render(None).decode(), "ignara_http_requests_total") == 0


QUEUES = {
    "flavors": ["h100"],
    "cluster_queues": [
        {
            "name": "team-a",
            "preemption": {"within_cluster_queue": "LowerPriority"},
            "resource_groups": [
                {
                    "resources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "h100", "quotas": {"nvidia.com/gpu": {"nominal": 2}}}],
                }
            ],
        }
    ],
    "tenants": [{"name": "alpha", "queues": ["team-a"]}],
}


def gang(name: str, gpus: int, priority: int = 0) -> WorkloadSubmission:
    return WorkloadSubmission(
        name=name,
        queue="team-a",
        priority=priority,
        pod_sets=(PodSetRequest("main", gpus, {"nvidia.com/gpu": "1"}),),
        max_runtime_seconds=60,
        command=("/bin/true",),
    )


async def test_admission_and_preemption_move_the_kueue_series(database: Database) -> None:
    async with database.session() as session:
        await apply_config(session, parse_config(QUEUES), actor="test")
        for name in ("a", "b", "c"):
            await submit_workload(session, "alpha", gang(name, 1), actor="test")
    metrics = GatewayMetrics()
    board = LiveBoard(database)
    runtime = AdmissionRuntime(database, {}, board=board, observe=Observability(metrics=metrics))
    assert value(metrics.render(await board.published()).decode(), "ignara_admission_leader") == 0

    await runtime.loop.run_pass()
    text = metrics.render(await board.published()).decode()
    queue = {"cluster_queue": "team-a"}
    assert value(text, "ignara_admitted_workloads_total", **queue) == 2
    assert value(text, "ignara_admission_wait_time_seconds_count", **queue) == 2
    assert value(text, "ignara_admitted_active_workloads", **queue) == 2
    assert value(text, "ignara_pending_workloads", status="active", **queue) == 1
    gpus = {"flavor": "h100", "resource": "nvidia.com/gpu", **queue}
    assert value(text, "ignara_cluster_queue_resource_usage", **gpus) == 2
    assert value(text, "ignara_cluster_queue_nominal_quota", **gpus) == 2
    assert value(text, "ignara_cluster_queue_borrowing", **gpus) == 0

    async with database.session() as session:
        await submit_workload(session, "alpha", gang("urgent", 2, priority=100), actor="test")
    await runtime.loop.run_pass()
    text = metrics.render(await board.published()).decode()
    assert value(text, "ignara_preempted_workloads_total", **queue) == 2
    (labels, _), *_ = samples(text, "ignara_preempted_workloads_total")
    assert labels["reason"]

    # A round as leader: the cycle is timed and the leader gauge says so.
    async with database.session() as session:
        assert (await session.exec(select(WorkloadRow))).all()
    try:
        assert await runtime.step()
        text = metrics.render(await board.published()).decode()
        assert value(text, "ignara_admission_leader") == 1
        assert value(text, "ignara_admission_cycle_duration_seconds_count") == 1
    finally:
        await runtime.stop()
    assert value(metrics.render(None).decode(), "ignara_admission_leader") == 0


def test_multiprocess_mode_adds_up_every_process(tmp_path: Path) -> None:
    """With PROMETHEUS_MULTIPROC_DIR, two processes' counts show in one scrape."""
    directory = tmp_path / "prom"
    directory.mkdir()
    observe = (
        "from gateway.observability import GatewayMetrics\n"
        "import sys\n"
        "m = GatewayMetrics(multiproc_dir=sys.argv[1])\n"
        "m.request('/healthz', 'GET', 200, 0.01)\n"
        "if sys.argv[2] == 'render':\n"
        "    sys.stdout.write(m.render(None).decode())\n"
    )
    env = {"PROMETHEUS_MULTIPROC_DIR": str(directory), "PYTHONPATH": str(Path.cwd())}
    for mode in ("count", "render"):
        done = subprocess.run(
            [sys.executable, "-c", observe, str(directory), mode],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
    assert value(done.stdout, "ignara_http_requests_total", route="/healthz") == 2
