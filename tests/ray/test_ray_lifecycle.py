"""Nothing lost, nothing run twice, on a real Ray head: the head stopped mid-run and brought
back (at its old address, knowing none of its old jobs), and the job's supervisor dying on a
head that stays up (Ray then shows the job FAILED, JOB_SUPERVISOR_ACTOR_DIED: Ray lost it,
the job did not fail). Each time the workload waits while Ray cannot answer, never fails,
is marked lost and requeued with events, runs once more as a new attempt (Ray's jobs
counted by submission id) and its quota comes back (a gang needing all of it runs)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import Settings
from tests.conftest import ADMIN_KEY
from tests.ray.test_ray_gateway import config, running_on_ray
from tests.slurm.test_slurm_gateway import Api
from tests.support.gangs import gang
from tests.support.ray import RayHead, _processes, head_pids, start_head, stop_head

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ray_jobs")]

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
# The first attempt runs until it is lost; the next one ends at once, saying so.
ONLY_AGAIN = 'case "$IGNARA_JOB" in *-1) sleep 120;; esac; echo second run'


@pytest.fixture
def api(settings: Settings, ray: RayHead) -> Iterator[Api]:
    with TestClient(app=create_app(settings)) as client:
        applied = client.post("/api/v1/admin/config", json=config(ray.url), headers=ADMIN)
        assert applied.status_code == 201, applied.text
        response = client.post(
            "/api/v1/admin/tenants/alpha/keys",
            json={"principal": "alpha-bot", "roles": ["member"]},
            headers=ADMIN,
        )
        assert response.status_code == 201, response.text
        yield Api(client, response.json()["token"])


def types(workload: dict[str, Any]) -> list[str]:
    return [e["type"] for e in workload["events"]]


def ran_again(api: Api, ray: RayHead, workload: str) -> dict[str, Any]:
    """The workload, once its second attempt succeeded: lost and requeued once, never
    failed, each attempt submitted to Ray once; and its quota back."""
    done = api.until(workload, lambda w: w["state"] in ("succeeded", "failed"), timeout=150)
    assert done["state"] == "succeeded", done
    assert done["attempt"] == 2 and done["backend_job_id"] == f"{workload}-2"
    assert types(done)[:7] == [
        "submitted",
        "admitted",
        "dispatched",
        "running",
        "lost",
        "requeued",
        "admitted",
    ]
    assert types(done)[-1] == "finished" and types(done).count("lost") == 1
    assert "failed" not in types(done)
    assert done["events"][4]["detail"]["job"] == f"{workload}-1"
    assert done["events"][5]["detail"] == {"why": "lost"}
    logs = api.client.get(f"/api/v1/workloads/{workload}/logs", headers=api.headers).text
    assert "second run" in logs.splitlines(), logs
    submissions = [j["submission_id"] for j in ray.jobs()]
    assert submissions.count(f"{workload}-2") == 1
    after = api.submit(gang("after", "echo after"))  # needs all of the queue's GPUs
    assert api.until(after, lambda w: w["state"] == "succeeded")["attempt"] == 1
    return done


def test_a_ray_head_stopped_mid_run_and_brought_back_loses_the_job_and_runs_it_again(
    api: Api, ray: RayHead
) -> None:
    workload = api.submit(gang("outage", ONLY_AGAIN))
    running_on_ray(api, workload)
    stop_head(ray.directory)
    try:
        # Ray cannot answer: the workload waits, saying so; nothing is failed meanwhile.
        waiting = api.until(
            workload, lambda w: (w["reason"] or {}).get("code") == "BackendUnavailable"
        )
        assert waiting["state"] in ("running", "admitted"), waiting
        time.sleep(2)  # a few passes while Ray is away
        assert api.get(workload)["state"] in ("running", "admitted")
    finally:
        start_head(ray.directory, again=True)  # at the same address, without its jobs
    done = ran_again(api, ray, workload)
    assert done["events"][4]["detail"]["backend"] == "ray-east"


def test_a_job_whose_supervisor_died_on_ray_is_lost_not_failed(api: Api, ray: RayHead) -> None:
    workload = api.submit(gang("orphan", ONLY_AGAIN))
    running_on_ray(api, workload)
    processes = _processes()
    supervisors = [pid for pid in head_pids(ray.directory) if "JobSupervisor" in processes[pid][1]]
    assert len(supervisors) == 1, [processes[p][1][:80] for p in head_pids(ray.directory)]
    os.kill(supervisors[0], signal.SIGKILL)  # Ray shows the job FAILED: its supervisor died
    done = ran_again(api, ray, workload)
    lost = done["events"][4]["detail"]
    assert "JOB_SUPERVISOR_ACTOR_DIED" in lost["message"], lost
