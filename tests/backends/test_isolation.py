"""What the gateway does with the local backend's isolation: the probe's report, refusal
without isolation (backend, API, dispatcher), IGNARA_LOCAL_BACKEND_UNSAFE, the settings,
limits from the pod sets, and the gateway's own files kept private."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.admission import AdmissionRuntime
from gateway.admission.dispatcher import job_limits
from gateway.app import create_app
from gateway.backends import (
    InvalidJobError,
    IsolationMode,
    IsolationSettings,
    JobLimits,
    JobRefusedError,
    JobSpec,
    JobState,
    LocalBackend,
)
from gateway.cli import _migrate_and_apply
from gateway.settings import Settings
from tenants import Database, parse_config
from tenants.models import WorkloadRow
from tenants.services import apply_config
from tenants.services.workloads import PodSetRequest, WorkloadSubmission, submit_workload
from tests.gateway.test_workload_api import CONFIG, bearer, key_for, wait_for, workload

NONE = IsolationSettings(isolation="none")
UNSAFE = IsolationSettings(isolation="none", unsafe=True)


def with_isolation(settings: Settings, isolation: IsolationSettings) -> Settings:
    backends = dataclasses.replace(settings.backends, local_isolation=isolation)
    return dataclasses.replace(settings, backends=backends)


async def wait_final(backend: LocalBackend, workload_id: str) -> Any:
    async with asyncio.timeout(10):
        while not (status := await backend.status(workload_id)).state.is_final:
            await asyncio.sleep(0.05)
    return status


# -- the backend ------------------------------------------------------------------------------


def test_the_probe_finds_uid_isolation_as_root(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("uid isolation needs root")
    isolation = LocalBackend(tmp_path / "jobs").probe()
    assert isolation.mode is IsolationMode.UID and isolation.runs_jobs
    assert isolation.refusal() is None
    assert isolation.severity == logging.INFO
    assert isolation.describe().startswith("uid: jobs run as their own uid (from 900000-965535)")
    # Nobody but the gateway may even list the job root.
    assert stat.S_IMODE((tmp_path / "jobs").stat().st_mode) == 0o700


async def test_without_isolation_the_backend_refuses_every_job(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "jobs", isolation=NONE)
    try:
        isolation = backend.probe()
        assert isolation.mode is IsolationMode.NONE and not isolation.runs_jobs
        assert isolation.severity == logging.ERROR
        assert "REFUSES every job" in isolation.describe()
        refusal = backend.refusal()
        assert refusal is not None and "IGNARA_LOCAL_BACKEND_UNSAFE=1" in refusal
        with pytest.raises(JobRefusedError, match="runs no jobs") as refused:
            await backend.submit(JobSpec("refused", ("true",), {}, 30))
        assert refused.value.code == "backend_refuses_jobs"
        assert (await backend.status("refused")).state is JobState.UNKNOWN
        assert not (tmp_path / "jobs" / "refused").exists()
    finally:
        await backend.close()


def test_a_job_root_that_cannot_be_made_means_no_isolation(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    backend = LocalBackend(tmp_path / "a-file" / "jobs")
    isolation = backend.probe()
    assert isolation.mode is IsolationMode.NONE
    assert "cannot prepare the job root" in (backend.refusal() or "")


async def test_unsafe_runs_jobs_unisolated_and_says_so(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "jobs", poll_seconds=0.05, isolation=UNSAFE)
    try:
        isolation = backend.probe()
        assert isolation.runs_jobs and isolation.severity == logging.WARNING
        assert "NONE, UNSAFE" in isolation.describe()
        assert "can read its database, key pepper, environment" in isolation.describe()
        await backend.submit(JobSpec("unsafe", ("/bin/sh", "-c", "pwd"), {}, 30))
        assert (await wait_final(backend, "unsafe")).state is JobState.SUCCEEDED
        # On the host, in its work directory: nothing isolates it.
        work = tmp_path / "jobs" / "unsafe" / "work"
        assert (await backend.logs("unsafe")).decode().strip() == str(work)
    finally:
        await backend.close()


async def test_a_job_seen_final_has_left_no_cgroup_behind(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "jobs", poll_seconds=0.05)
    try:
        if not backend.probe().limits["processes"].startswith("cgroup"):
            pytest.skip("no job cgroups here")
        limits = JobLimits(memory_bytes=256 << 20, cpu_millis=500)
        # It waits for "go" in its work directory, then leaves a process behind and ends.
        script = "while [ ! -e go ]; do sleep 0.02; done; sleep 0.2 &"
        await backend.submit(JobSpec("tidy", ("/bin/sh", "-c", script), {}, 30, limits))
        cgroups = backend.job_cgroups("tidy")
        assert cgroups and all(path.is_dir() for path in cgroups.values())
        (tmp_path / "jobs" / "tidy" / "work" / "go").touch()
        assert (await wait_final(backend, "tidy")).state is JobState.SUCCEEDED
        assert not any(path.exists() for path in cgroups.values())
    finally:
        await backend.close()


def test_the_host_network_is_reported_loudly(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("uid isolation needs root")
    isolation = LocalBackend(tmp_path / "jobs", isolation=IsolationSettings(network="host")).probe()
    assert "net" not in isolation.namespaces
    assert isolation.severity == logging.WARNING
    assert "THE HOST'S" in isolation.describe()


@pytest.mark.parametrize(
    "limits",
    [
        {"memory_bytes": 0},
        {"memory_bytes": -1},
        {"cpu_millis": True},
        {"cpu_millis": 1.5},
        {"memory_bytes": 2**61},
    ],
)
def test_bad_limits_are_refused(limits: dict[str, Any]) -> None:
    with pytest.raises(InvalidJobError):
        JobLimits(**limits)


# -- settings ---------------------------------------------------------------------------------


def test_settings_read_the_isolation_variables() -> None:
    settings = Settings.from_env(
        {
            "IGNARA_LOCAL_BACKEND_ISOLATION": "userns",
            "IGNARA_LOCAL_BACKEND_UNSAFE": "1",
            "IGNARA_LOCAL_BACKEND_NETWORK": "host",
            "IGNARA_LOCAL_BACKEND_UIDS": "200000-200099",
            "IGNARA_LOCAL_BACKEND_MAX_PROCESSES": "64",
            "IGNARA_LOCAL_BACKEND_READONLY_PATHS": "/opt/models:/data/sets",
            "IGNARA_LOCAL_BACKEND_CGROUP": "/ignara",
        }
    )
    assert settings.backends.local_isolation == IsolationSettings(
        isolation="userns",
        unsafe=True,
        network="host",
        uids=(200_000, 200_099),
        max_processes=64,
        readonly_paths=("/opt/models", "/data/sets"),
        cgroup="/ignara",
    )
    assert Settings.from_env({}).backends.local_isolation == IsolationSettings()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("IGNARA_LOCAL_BACKEND_ISOLATION", "chroot", "isolation must be one of"),
        ("IGNARA_LOCAL_BACKEND_NETWORK", "bridge", "network must be one of"),
        ("IGNARA_LOCAL_BACKEND_UIDS", "5000-4000", "job uids must be a range"),
        ("IGNARA_LOCAL_BACKEND_UIDS", "0-100", "job uids must be a range"),  # root a job?
        ("IGNARA_LOCAL_BACKEND_UIDS", "lots", "IGNARA_LOCAL_BACKEND_UIDS must be FIRST-LAST"),
        ("IGNARA_LOCAL_BACKEND_MAX_PROCESSES", "1", "process cap must be between"),
        ("IGNARA_LOCAL_BACKEND_READONLY_PATHS", "relative/path", "must be absolute"),
        ("IGNARA_LOCAL_BACKEND_READONLY_PATHS", "/", "must be absolute"),
        ("IGNARA_LOCAL_BACKEND_CGROUP", "ignara", "cgroup must be a path"),
    ],
)
def test_bad_isolation_settings_stop_the_gateway(name: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Settings.from_env({name: value})


# -- the API and the start-up line -------------------------------------------------------------


@pytest.fixture
def refusing(settings: Settings) -> Iterator[TestClient[Any]]:
    with TestClient(app=create_app(with_isolation(settings, NONE))) as client:
        admin = bearer("test-bootstrap-admin-key-0123456789")
        assert client.post("/api/v1/admin/config", json=CONFIG, headers=admin).status_code == 201
        yield client


def test_the_api_refuses_local_workloads_when_jobs_cannot_be_isolated(
    refusing: TestClient[Any], settings: Settings
) -> None:
    alpha = bearer(key_for(refusing, "alpha"))
    response = refusing.post("/api/v1/workloads", json=workload(), headers=alpha)
    assert response.status_code == 409, response.text
    error = response.json()["error"]
    assert error["code"] == "backend_refuses_jobs"
    assert error["type"] == "conflict_error"
    assert "IGNARA_LOCAL_BACKEND_UNSAFE=1" in error["message"]
    assert refusing.get("/api/v1/workloads", headers=alpha).json()["items"] == []  # not kept
    assert not any(Path(settings.backends.local_root).glob("*/status.json"))


def test_with_unsafe_the_api_runs_local_workloads(settings: Settings) -> None:
    with TestClient(app=create_app(with_isolation(settings, UNSAFE))) as client:
        admin = bearer("test-bootstrap-admin-key-0123456789")
        assert client.post("/api/v1/admin/config", json=CONFIG, headers=admin).status_code == 201
        alpha = key_for(client, "alpha")
        created = client.post("/api/v1/workloads", json=workload(), headers=bearer(alpha))
        assert created.status_code == 201, created.text
        wait_for(client, alpha, created.json()["id"], "succeeded")


@pytest.mark.parametrize(
    ("isolation", "level", "text"),
    [
        (IsolationSettings(), logging.INFO, "local backend isolation: uid: "),
        (NONE, logging.ERROR, "local backend isolation: none (isolation set to none"),
        (UNSAFE, logging.WARNING, "local backend isolation: NONE, UNSAFE"),
    ],
)
def test_the_gateway_says_at_start_which_isolation_holds(
    settings: Settings, isolation: IsolationSettings, level: int, text: str
) -> None:
    if os.geteuid() != 0 and isolation.isolation == "auto":
        pytest.skip("uid isolation needs root")
    # On the logger itself: the app's logging config replaces the root's handlers (caplog's).
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("gateway.services")
    logger.addHandler(handler)
    try:
        with TestClient(app=create_app(with_isolation(settings, isolation))):
            pass
    finally:
        logger.removeHandler(handler)
    lines = [r for r in records if r.getMessage().startswith("local backend isolation")]
    assert len(lines) == 1
    assert lines[0].levelno == level and lines[0].getMessage().startswith(text)


def test_the_sqlite_database_and_pepper_are_private(settings: Settings, tmp_path: Path) -> None:
    database = tmp_path / "private.db"
    pepper = tmp_path / "pepper"
    private = dataclasses.replace(
        settings,
        database=dataclasses.replace(settings.database, url=f"sqlite:///{database}"),
        auth=dataclasses.replace(settings.auth, pepper=None, pepper_file=str(pepper)),
    )
    with TestClient(app=create_app(private)):
        pass
    assert stat.S_IMODE(database.stat().st_mode) == 0o600
    assert stat.S_IMODE(pepper.stat().st_mode) == 0o600


def test_the_cli_creates_the_sqlite_database_private(tmp_path: Path) -> None:
    database = tmp_path / "cli.db"
    settings = Settings.from_env({"DATABASE_URL": f"sqlite:///{database}"})
    _migrate_and_apply(settings, None)  # what `ignara serve` and `ignara apply` run first
    assert stat.S_IMODE(database.stat().st_mode) == 0o600


# -- the dispatcher ----------------------------------------------------------------------------

QUEUE_CONFIG = {
    "flavors": ["h100"],
    "cluster_queues": [
        {
            "name": "team-a",
            "resource_groups": [
                {
                    "resources": ["nvidia.com/gpu", "memory", "cpu"],
                    "flavors": [
                        {
                            "name": "h100",
                            "quotas": {
                                "nvidia.com/gpu": {"nominal": 4},
                                "memory": {"nominal": "8Gi"},
                                "cpu": {"nominal": "8"},
                            },
                        }
                    ],
                }
            ],
        }
    ],
    "tenants": [{"name": "alpha", "queues": ["team-a"]}],
}


@pytest.fixture
async def configured(database: Database) -> Database:
    async with database.session() as session:
        await apply_config(session, parse_config(QUEUE_CONFIG), actor="test")
    return database


async def run_until_final(
    runtime: AdmissionRuntime, database: Database, workload_id: str
) -> WorkloadRow:
    for _ in range(400):  # 20 s at most
        await runtime.step()
        async with database.session() as session:
            row = await session.get(WorkloadRow, workload_id)
        assert row is not None
        if row.state in ("succeeded", "failed", "cancelled"):
            return row
        await asyncio.sleep(0.05)
    raise AssertionError(f"{workload_id} never ended: {row.state} {row.reason_message}")


async def submit(database: Database, command: tuple[str, ...], memory: str = "64Mi") -> str:
    submission = WorkloadSubmission(
        name="job",
        queue="team-a",
        pod_sets=(PodSetRequest("workers", 2, {"nvidia.com/gpu": "1", "memory": memory}),),
        max_runtime_seconds=60,
        command=command,
    )
    async with database.session() as session:
        row, _ = await submit_workload(session, "alpha", submission, actor="test")
    return row.id


@pytest.fixture
async def backend_for(tmp_path: Path) -> AsyncIterator[dict[str, LocalBackend]]:
    made: dict[str, LocalBackend] = {}
    yield made
    for backend in made.values():
        await backend.close()


async def test_the_dispatcher_fails_a_workload_the_backend_refuses(
    configured: Database, tmp_path: Path, backend_for: dict[str, LocalBackend]
) -> None:
    backend = backend_for["local"] = LocalBackend(tmp_path / "jobs", isolation=NONE)
    runtime = AdmissionRuntime(configured, backend_for, interval=0.05)
    workload_id = await submit(configured, ("/bin/sh", "-c", "echo must not run"))
    row = await run_until_final(runtime, configured, workload_id)
    assert (row.state, row.reason_code) == ("failed", "BackendRefused")
    assert "cannot isolate them" in (row.reason_message or "")
    assert (await backend.status(f"{workload_id}-1")).state is JobState.UNKNOWN
    await runtime.stop()


async def test_the_dispatcher_gives_a_job_its_pod_sets_memory(
    configured: Database, tmp_path: Path, backend_for: dict[str, LocalBackend]
) -> None:
    if os.geteuid() != 0:
        pytest.skip("uses uid isolation")
    backend_for["local"] = LocalBackend(tmp_path / "jobs", poll_seconds=0.05)
    runtime = AdmissionRuntime(configured, backend_for, interval=0.05)
    # Two pods of 64Mi: the job may use 128Mi in all.
    greedy = "x = [b'x' * (16 << 20) for _ in range(64)]; print('allocated')"
    workload_id = await submit(configured, ("/usr/bin/python3", "-c", greedy))
    row = await run_until_final(runtime, configured, workload_id)
    assert row.state == "failed"
    assert (row.reason_message or "").startswith(
        f"out of memory: the job exceeded its limit of {128 << 20} bytes"
    )
    await runtime.stop()


@pytest.mark.parametrize(
    ("pod_sets", "admission", "expected"),
    [
        ([], None, JobLimits()),
        (
            [{"name": "a", "count": 2, "requests": {"memory": "1Gi", "cpu": "500m"}}],
            None,
            JobLimits(memory_bytes=2 << 30, cpu_millis=1000),
        ),
        (  # admitted with fewer pods than asked (min_count): the admitted count holds
            [{"name": "a", "count": 4, "requests": {"memory": "1Gi"}}],
            {"pod_sets": [{"name": "a", "count": 3}]},
            JobLimits(memory_bytes=3 << 30),
        ),
        (  # a pod set without a request adds nothing; a resource none requests: no limit
            [
                {"name": "a", "count": 1, "requests": {"cpu": "2"}},
                {"name": "b", "count": 3, "requests": {"nvidia.com/gpu": 1, "cpu": "250m"}},
            ],
            None,
            JobLimits(cpu_millis=2750),
        ),
        (  # a fraction of a byte rounds up
            [{"name": "a", "count": 1, "requests": {"memory": "1500m"}}],
            None,
            JobLimits(memory_bytes=2),
        ),
    ],
)
def test_job_limits_sum_the_pod_sets(
    pod_sets: list[dict[str, Any]], admission: dict[str, Any] | None, expected: JobLimits
) -> None:
    assert job_limits({"pod_sets": pod_sets}, admission) == expected


def test_job_limits_refuse_a_bad_quantity() -> None:
    bad = {"pod_sets": [{"name": "a", "count": 1, "requests": {"memory": "lots"}}]}
    with pytest.raises(ValueError):
        job_limits(bad, None)
