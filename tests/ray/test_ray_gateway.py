"""Gangs through the gateway onto a real Ray head (tests/ray/conftest.py): the flavor names
the Ray backend, so a workload submitted with POST /api/v1/workloads is admitted, runs as a
Ray job (checked on Ray's Jobs API itself) with the gang's GPUs, finishes and releases its
quota; a user's cancel stops the Ray job; a higher-priority gang preempts it there, and the
preempted one waits and runs again later as a new submission. Logs come from Ray."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import Settings
from tests.conftest import ADMIN_KEY

# The gateway-driving helpers the Slurm stories use serve these just as well.
from tests.slurm.test_slurm_gateway import Api, ThreadedRelay
from tests.support.gangs import gang, gang_config
from tests.support.processes import ended_within
from tests.support.ray import RayHead

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ray_jobs")]

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def config(url: str) -> dict[str, Any]:
    return gang_config({"name": "ray-east", "kind": "ray", "url": url, "timeout_seconds": 2})


def ray_job(head: RayHead, submission_id: str) -> dict[str, Any]:
    response = httpx.get(f"{head.url}/api/jobs/{submission_id}", timeout=10)
    assert response.status_code == 200, response.text
    job: dict[str, Any] = response.json()
    return job


@pytest.fixture
def relay(ray: RayHead) -> Iterator[ThreadedRelay]:
    running = ThreadedRelay(ray.url)
    yield running
    running.close()


@pytest.fixture
def api(settings: Settings, relay: ThreadedRelay) -> Iterator[Api]:
    with TestClient(app=create_app(settings)) as client:
        applied = client.post("/api/v1/admin/config", json=config(relay.url), headers=ADMIN)
        assert applied.status_code == 201, applied.text
        response = client.post(
            "/api/v1/admin/tenants/alpha/keys",
            json={"principal": "alpha-bot", "roles": ["member"]},
            headers=ADMIN,
        )
        assert response.status_code == 201, response.text
        yield Api(client, response.json()["token"])


def running_on_ray(api: Api, workload_id: str) -> dict[str, Any]:
    return api.until(
        workload_id, lambda w: w["state"] == "running" and w["backend_state"] == "RUNNING"
    )


def test_a_gang_runs_on_ray_finishes_and_releases_its_quota(api: Api, ray: RayHead) -> None:
    first = api.submit(gang("first", 'echo "gang on gpus $CUDA_VISIBLE_DEVICES"; sleep 3'))
    second = api.submit(gang("second", "echo second"))  # no quota left until the first ends
    running = running_on_ray(api, first)
    assert running["backend"] == "ray-east" and running["backend_job_id"] == f"{first}-1"
    assert running["exit_code"] is None
    job = ray_job(ray, f"{first}-1")
    assert job["status"] == "RUNNING"
    assert job["metadata"] == {
        "ignara.job": f"{first}-1",
        "ignara.workload": first,
        "ignara.tenant": "alpha",
        "ignara.queue": "team-a",
    }
    assert api.get(second)["state"] == "pending"

    done = api.until(first, lambda w: w["state"] == "succeeded")
    assert done["backend_state"] == "SUCCEEDED" and done["exit_code"] == 0
    assert done["started_at"] and done["finished_at"]
    logs = api.client.get(f"/api/v1/workloads/{first}/logs", headers=api.headers).text
    assert "gang on gpus 0,1" in logs.splitlines(), logs
    # Its quota is back: the second gang is admitted and runs to the end.
    assert api.until(second, lambda w: w["state"] == "succeeded")["backend"] == "ray-east"


def test_cancel_by_the_user_stops_the_ray_job(api: Api, ray: RayHead) -> None:
    workload = api.submit(gang("long", "sleep 300"))
    running_on_ray(api, workload)
    response = api.client.delete(f"/api/v1/workloads/{workload}", headers=api.headers)
    assert response.status_code == 200, response.text
    cancelled = api.until(workload, lambda w: w["state"] == "cancelled")
    assert cancelled["backend_state"] == "STOPPED"
    assert ray_job(ray, f"{workload}-1")["status"] == "STOPPED"


def test_a_preempted_gang_is_stopped_on_ray_waits_and_runs_again(api: Api, ray: RayHead) -> None:
    low = api.submit(gang("low", "sleep 300", priority=0))
    running_on_ray(api, low)

    high = api.submit(gang("high", "echo high; sleep 2", priority=100))
    preempted = api.until(low, lambda w: w["state"] == "pending" and w["attempt"] == 1)
    assert preempted["reason"]["code"] == "Preempted"
    api.until(low, lambda w: w["backend_state"] == "STOPPED")
    assert ray_job(ray, f"{low}-1")["status"] == "STOPPED"
    assert running_on_ray(api, high)["backend_job_id"] == f"{high}-1"

    api.until(high, lambda w: w["state"] == "succeeded")
    again = running_on_ray(api, low)
    assert again["attempt"] == 2 and again["backend_job_id"] == f"{low}-2"
    assert ray_job(ray, f"{low}-2")["status"] == "RUNNING"


def test_an_unreachable_ray_makes_work_wait_never_fail_nor_run_twice(
    api: Api, ray: RayHead, relay: ThreadedRelay
) -> None:
    relay.down()
    workload = api.submit(gang("patient", "sleep 4"))
    waiting = api.until(workload, lambda w: (w["reason"] or {}).get("code") == "BackendUnavailable")
    assert waiting["state"] == "admitted" and "cannot reach Ray" in waiting["reason"]["message"]
    relay.up()
    running_on_ray(api, workload)
    relay.down()  # while it runs: the gateway cannot see it, and does not give up on it
    unseen = api.until(workload, lambda w: w["reason"]["code"] == "BackendUnavailable")
    assert unseen["state"] == "running"
    relay.up()
    done = api.until(workload, lambda w: w["state"] == "succeeded")
    assert done["backend_job_id"] == f"{workload}-1"
    assert [j["submission_id"] for j in ray.jobs()].count(f"{workload}-1") == 1


def test_a_gang_cancelled_while_pending_on_ray_never_runs_to_its_end(
    api: Api, ray: RayHead, tmp_path: Path
) -> None:
    # Someone else's job holds all eight GPUs: the gang is submitted and waits on Ray.
    hog = httpx.post(
        f"{ray.url}/api/jobs/",
        json={"entrypoint": "sleep 6", "entrypoint_num_gpus": 8},
        timeout=10,
    )
    assert hog.status_code == 200, hog.text
    marker, pidfile = tmp_path / "finished", tmp_path / "pid"
    # Its end is 30 s away, so the stop comes first however loaded the machine is.
    workload = api.submit(gang("queued", f"echo $$ > {pidfile} && sleep 30 && touch {marker}"))
    pending = api.until(workload, lambda w: w["backend_state"] == "PENDING")
    assert pending["state"] == "running" and pending["reason"]["code"] == "BackendPending"
    response = api.client.delete(f"/api/v1/workloads/{workload}", headers=api.headers)
    assert response.status_code == 200, response.text
    cancelled = api.until(workload, lambda w: w["state"] == "cancelled")
    assert cancelled["backend_state"] == "STOPPED"
    assert ray_job(ray, f"{workload}-1")["status"] == "STOPPED"
    # Stopped before its shell started or while it slept: no process of it is left.
    if pidfile.exists():
        pid = int(pidfile.read_text())
        assert ended_within(pid, 15), f"the cancelled gang's shell {pid} still runs"
    assert not marker.exists()
