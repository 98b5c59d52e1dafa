"""Through the gateway's dispatcher: a `kind: kubernetes` backend declared in the config
is built by the registry; an admitted gang on its flavor becomes an indexed Job on the
(FAKE) API server, labelled with its tenant and queue and placed by its flavor; the Job's
Complete condition finishes the workload; a cancel deletes the Job and, once it is gone,
the workload is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.admission.dispatcher import Dispatcher
from gateway.backends import Backend, JobSpec
from gateway.backends.registry import BackendRegistry
from tenants import Database, parse_config
from tenants.models import WorkloadRow
from tenants.services import apply_config
from tenants.services.config import load_backend_config
from tests.conftest import fresh_sqlite
from tests.kubernetes.schemas import validate_job, validate_jobset
from tests.support.kube_api import FakeKubeApi

GPU = "nvidia.com/gpu"


@pytest.fixture
async def sqlite(sqlite_template: Path, tmp_path: Path) -> AsyncIterator[Database]:
    db = Database(fresh_sqlite(sqlite_template, tmp_path / "ignara.db"))
    await db.migrate()
    yield db
    await db.dispose()


@pytest.fixture
async def registry(
    sqlite: Database, api: FakeKubeApi, tmp_path: Path
) -> AsyncIterator[BackendRegistry]:
    config = {
        "flavors": [{"name": "h100", "backend": "k8s-prod"}],
        "cluster_queues": [
            {
                "name": "q",
                "resource_groups": [
                    {
                        "resources": [GPU],
                        "flavors": [{"name": "h100", "quotas": {GPU: {"nominal": 8}}}],
                    }
                ],
            }
        ],
        "tenants": [{"name": "acme", "queues": ["q"]}],
        "backends": [
            {
                "name": "k8s-prod",
                "kind": "kubernetes",
                "kubeconfig": str(api.kubeconfig(tmp_path)),
                "namespace": "training",
                "image": "registry.example/train:1",
                "flavors": {"h100": {"node_labels": {"gpu": "h100"}}},
            }
        ],
    }
    async with sqlite.session() as session:
        await apply_config(session, parse_config(config), actor="test")
    backends: dict[str, Backend] = {}
    flavor_backends: dict[str, str] = {}
    registry = BackendRegistry(backends, flavor_backends, {})
    async with sqlite.session() as session:
        await registry.apply(await load_backend_config(session))
    yield registry
    for backend in backends.values():
        await backend.close()


async def admitted(database: Database) -> str:
    row = WorkloadRow(
        tenant="acme",
        name="train",
        queue="q",
        state="admitted",
        attempt=1,
        spec={
            "pod_sets": [{"name": "workers", "count": 2, "requests": {GPU: "1", "cpu": "2"}}],
            "max_runtime_seconds": 600,
            "job": {"command": ["python", "train.py"], "env": {"SEED": "1"}},
        },
        admission={
            "cluster_queue": "q",
            "pod_sets": [{"name": "workers", "count": 2, "flavors": {GPU: "h100", "cpu": "h100"}}],
        },
    )
    async with database.session() as session:
        session.add(row)
    return row.id


async def passes_until(
    dispatcher: Dispatcher, database: Database, workload: str, check: Callable[[WorkloadRow], bool]
) -> WorkloadRow:
    """Dispatcher passes until the row is as ``check`` wants (bounded): the backend follows
    the API server by a watch, so a change shows a moment after the fake makes it."""
    async with asyncio.timeout(10):
        while not check(row := await read(database, workload)):
            await dispatcher.run_pass()
            await asyncio.sleep(0.01)
    return row


async def read(database: Database, workload: str) -> WorkloadRow:
    async with database.session() as session:
        row = await session.get(WorkloadRow, workload)
    assert row is not None
    return row


async def test_an_admitted_gang_runs_as_a_job_to_its_end(
    sqlite: Database, api: FakeKubeApi, registry: BackendRegistry
) -> None:
    dispatcher = Dispatcher(sqlite, registry.backends, registry.flavor_backends)
    workload = await admitted(sqlite)
    assert (await dispatcher.run_pass()).started == [workload]
    job = api.get("jobs", f"{workload}-1")
    assert job is not None
    validate_job(job)
    labels = job["metadata"]["labels"]
    assert (labels["ignara.io/tenant"], labels["ignara.io/queue"]) == ("acme", "q")
    assert (labels["ignara.io/workload"], labels["ignara.io/attempt"]) == (workload, "1")
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpu": "h100"}
    assert pod["containers"][0]["resources"]["limits"] == {GPU: "1"}
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (2, 2)

    api.set_status(
        "jobs", f"{workload}-1", {"active": 2, "ready": 2, "startTime": "2026-11-25T10:00:00Z"}
    )
    row = await passes_until(dispatcher, sqlite, workload, lambda r: r.backend_state == "Running")
    assert (row.state, row.backend) == ("running", "k8s-prod")
    assert row.backend_job_id == f"training/{workload}-1" and row.started_at is not None

    complete = {"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-25T10:05:00Z"}
    api.set_status("jobs", f"{workload}-1", {"succeeded": 2, "conditions": [complete]})
    row = await passes_until(dispatcher, sqlite, workload, lambda r: r.finished_at is not None)
    assert (row.state, row.exit_code, row.backend_state) == ("succeeded", 0, "Complete")


async def test_cancel_deletes_the_job_and_ends_once_it_is_gone(
    sqlite: Database, api: FakeKubeApi, registry: BackendRegistry
) -> None:
    dispatcher = Dispatcher(sqlite, registry.backends, registry.flavor_backends)
    workload = await admitted(sqlite)
    await dispatcher.run_pass()
    async with sqlite.session() as session:
        row = await session.get(WorkloadRow, workload)
        assert row is not None
        row.cancel_requested = True
        row.version += 1
        session.add(row)
    api.hold_deletions = True
    await dispatcher.run_pass()
    deletes = [r for r in api.requests if r.method == "DELETE"]
    assert [(r.path.rsplit("/", 1)[1], r.query["propagationPolicy"]) for r in deletes] == [
        (f"{workload}-1", "Foreground")
    ]
    assert (await read(sqlite, workload)).state == "running"  # its pods are still going
    api.collect_garbage()
    row = await passes_until(dispatcher, sqlite, workload, lambda r: r.finished_at is not None)
    assert (row.state, row.reason_code) == ("cancelled", "Cancelled")
    assert api.get("jobs", f"{workload}-1") is None


async def test_a_preempted_gang_has_its_job_deleted_and_waits_again(
    sqlite: Database, api: FakeKubeApi, registry: BackendRegistry
) -> None:
    dispatcher = Dispatcher(sqlite, registry.backends, registry.flavor_backends)
    workload = await admitted(sqlite)
    await dispatcher.run_pass()
    async with sqlite.session() as session:  # what the admission loop does on preemption
        row = await session.get(WorkloadRow, workload)
        assert row is not None
        row.state, row.admission, row.reason_code = "pending", None, "Preempted"
        row.version += 1
        session.add(row)
    # The job is deleted at once; the workload is stopped once the backend (which follows
    # the API server by a watch) no longer sees it.
    row = await passes_until(dispatcher, sqlite, workload, lambda r: r.job_id is None)
    assert api.get("jobs", f"{workload}-1") is None
    assert (row.state, row.job_id, row.reason_code) == ("pending", None, "Preempted")


async def test_a_gang_of_two_pod_sets_becomes_a_jobset(
    sqlite: Database, api: FakeKubeApi, registry: BackendRegistry
) -> None:
    dispatcher = Dispatcher(sqlite, registry.backends, registry.flavor_backends)
    row = WorkloadRow(
        tenant="acme",
        name="train",
        queue="q",
        state="admitted",
        attempt=3,
        spec={
            "pod_sets": [
                {"name": "launcher", "count": 1, "requests": {"cpu": "1"}},
                {"name": "workers", "count": 4, "requests": {GPU: "8"}},
            ],
            "max_runtime_seconds": 600,
            "job": {"command": ["torchrun", "train.py"]},
        },
        admission={
            "cluster_queue": "q",
            "pod_sets": [
                {"name": "launcher", "count": 1, "flavors": {"cpu": "h100"}},
                {"name": "workers", "count": 4, "flavors": {GPU: "h100"}},
            ],
        },
    )
    async with sqlite.session() as session:
        session.add(row)
    await dispatcher.run_pass()
    jobset = api.get("jobsets", f"{row.id}-3")
    assert jobset is not None
    replicated = {r["name"]: r["template"]["spec"] for r in jobset["spec"]["replicatedJobs"]}
    assert replicated["workers"]["parallelism"] == 4
    assert replicated["workers"]["template"]["spec"]["nodeSelector"] == {"gpu": "h100"}
    validate_jobset({k: v for k, v in jobset.items() if k != "status"})
    done = {"type": "Completed", "status": "True", "lastTransitionTime": "2026-11-25T10:05:00Z"}
    api.set_status("jobsets", f"{row.id}-3", {"conditions": [done]})
    done_row = await passes_until(dispatcher, sqlite, row.id, lambda r: r.finished_at is not None)
    assert done_row.state == "succeeded"


async def preempt(database: Database, workload: str) -> None:
    """What the admission loop does on preemption: back to pending, the admission gone, the
    job (if named) left for the dispatcher to stop."""
    async with database.session() as session:
        row = await session.get(WorkloadRow, workload)
        assert row is not None
        row.state, row.admission, row.reason_code = "pending", None, "Preempted"
        row.version += 1
        session.add(row)


class PreemptedWhileSubmitting:
    """The declared backend, with a preemption landing just after its submit reached the
    API server and before the dispatcher noted the job: the window this test holds open."""

    def __init__(self, backend: Backend, database: Database, workload: str) -> None:
        self.backend, self.database, self.workload = backend, database, workload
        self.name = backend.name

    async def submit(self, job: JobSpec) -> bool | None:
        found = await self.backend.submit(job)
        await preempt(self.database, self.workload)
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)


async def test_a_gang_preempted_between_its_submit_and_its_noting_leaves_no_job(
    sqlite: Database, api: FakeKubeApi, registry: BackendRegistry
) -> None:
    workload = await admitted(sqlite)
    racing = PreemptedWhileSubmitting(registry.backends["k8s-prod"], sqlite, workload)
    dispatcher = Dispatcher(sqlite, {"k8s-prod": racing}, registry.flavor_backends)  # type: ignore[dict-item]
    assert (await dispatcher.run_pass()).started == []  # the row changed under the submit
    assert api.get("jobs", f"{workload}-1") is not None  # the job is on the cluster
    row = await read(sqlite, workload)
    assert (row.state, row.job_id, row.backend) == ("pending", f"{workload}-1", "k8s-prod")
    # The next passes see a preempted workload with its job named: the job is deleted.
    follow = Dispatcher(sqlite, registry.backends, registry.flavor_backends)
    row = await passes_until(follow, sqlite, workload, lambda r: r.job_id is None)
    assert api.get("jobs", f"{workload}-1") is None
    assert (row.state, row.reason_code) == ("pending", "Preempted")


async def test_a_gang_readmitted_before_its_old_job_was_stopped_stops_it_first(
    sqlite: Database, api: FakeKubeApi, registry: BackendRegistry
) -> None:
    dispatcher = Dispatcher(sqlite, registry.backends, registry.flavor_backends)
    workload = await admitted(sqlite)
    await dispatcher.run_pass()
    assert api.get("jobs", f"{workload}-1") is not None
    # Preempted, then admitted again (attempt 2) before any dispatcher pass stopped job 1.
    async with sqlite.session() as session:
        row = await session.get(WorkloadRow, workload)
        assert row is not None
        row.state, row.attempt, row.version = "admitted", 2, row.version + 1
        session.add(row)
    row = await passes_until(dispatcher, sqlite, workload, lambda r: r.state == "running")
    assert row.job_id == f"{workload}-2" and api.get("jobs", f"{workload}-2") is not None
    assert api.get("jobs", f"{workload}-1") is None  # deleted before job 2 was created
    creates = [r.path.rsplit("/", 1)[-1] for r in api.requests if r.method == "POST"]
    deletes = [r.path.rsplit("/", 1)[-1] for r in api.requests if r.method == "DELETE"]
    assert set(deletes) == {f"{workload}-1"} and len(creates) == 2


async def test_jobs_are_deleted_by_kubernetes_a_week_after_they_end_unless_configured(
    sqlite: Database, api: FakeKubeApi, registry: BackendRegistry
) -> None:
    dispatcher = Dispatcher(sqlite, registry.backends, registry.flavor_backends)
    workload = await admitted(sqlite)
    await dispatcher.run_pass()
    job = api.get("jobs", f"{workload}-1")
    assert job is not None and job["spec"]["ttlSecondsAfterFinished"] == 7 * 86400
    validate_job(job)
