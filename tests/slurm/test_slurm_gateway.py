"""Gangs through the gateway onto a real Slurm (tests/slurm/conftest.py): the flavor names
the Slurm backend, so a workload submitted with POST /api/v1/workloads is admitted, runs as
a Slurm job (checked on slurmrestd itself), finishes and releases its quota; a user's
cancel cancels the Slurm job; a higher-priority gang preempts it there, and the preempted
one waits and runs again later as a new job. Logs come from the job's output file."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import Settings
from tests.conftest import ADMIN_KEY
from tests.slurm.helpers import (
    TOKEN_ENV,
    ThreadedRelay,
    config,
    jobs_named,
    slurm_job,
)
from tests.support.gangs import gang
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("slurm_jobs")]

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


class Api:
    def __init__(self, client: TestClient[Any], key: str) -> None:
        self.client = client
        self.headers = {"Authorization": f"Bearer {key}"}

    def submit(self, body: dict[str, Any]) -> str:
        response = self.client.post("/api/v1/workloads", json=body, headers=self.headers)
        assert response.status_code == 201, response.text
        workload_id: str = response.json()["id"]
        return workload_id

    def get(self, workload_id: str) -> dict[str, Any]:
        response = self.client.get(f"/api/v1/workloads/{workload_id}", headers=self.headers)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def until(
        self, workload_id: str, done: Callable[[dict[str, Any]], bool], timeout: float = 90
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            body = self.get(workload_id)
            if done(body):
                return body
            assert time.monotonic() < deadline, body
            time.sleep(0.3)

    def running_on_slurm(self, workload_id: str) -> dict[str, Any]:
        return self.until(
            workload_id,
            lambda w: w["state"] == "running" and w["backend_state"] == "RUNNING",
        )


@pytest.fixture
def relay(slurm: SlurmCluster) -> Iterator[ThreadedRelay]:
    running = ThreadedRelay(slurm.url)
    yield running
    running.close()


@pytest.fixture
def api(slurm: SlurmCluster, settings: Settings, relay: ThreadedRelay) -> Iterator[Api]:
    backends = replace(settings.backends, secret_env={TOKEN_ENV: slurm.token})
    with TestClient(app=create_app(replace(settings, backends=backends))) as client:
        applied = client.post("/api/v1/admin/config", json=config(slurm, relay.url), headers=ADMIN)
        assert applied.status_code == 201, applied.text
        response = client.post(
            "/api/v1/admin/tenants/alpha/keys",
            json={"principal": "alpha-bot", "roles": ["member"]},
            headers=ADMIN,
        )
        assert response.status_code == 201, response.text
        yield Api(client, response.json()["token"])


def test_a_gang_runs_on_slurm_finishes_and_releases_its_quota(
    api: Api, slurm: SlurmCluster
) -> None:
    first = api.submit(gang("first", 'echo "pod $SLURM_PROCID of $SLURM_NTASKS"; sleep 4'))
    second = api.submit(gang("second", "echo second"))  # no quota left until the first ends
    running = api.running_on_slurm(first)
    assert running["backend"] == "hpc" and running["backend_job_id"]
    assert running["started_at"] and running["exit_code"] is None
    job = slurm_job(slurm, running["backend_job_id"])
    assert job["job_state"] == "RUNNING" and job["name"] == f"{first}-1"
    assert job["tres_per_task"] == "gres:gpu:1" and job["partition"] == slurm.partition
    assert api.get(second)["state"] == "pending"

    done = api.until(first, lambda w: w["state"] == "succeeded")
    assert done["backend_state"] == "COMPLETED" and done["exit_code"] == 0
    assert done["started_at"] and done["finished_at"]
    assert slurm_job(slurm, done["backend_job_id"])["job_state"] == "COMPLETED"
    logs = api.client.get(f"/api/v1/workloads/{first}/logs", headers=api.headers).text
    assert sorted(logs.splitlines()) == ["pod 0 of 2", "pod 1 of 2"], logs
    # Its quota is back: the second gang is admitted and runs to the end.
    assert api.until(second, lambda w: w["state"] == "succeeded")["backend"] == "hpc"


def test_the_slurm_section_reaches_the_slurm_job(api: Api, slurm: SlurmCluster) -> None:
    body = gang("tuned", "sleep 30")
    body["slurm"] = {"exclusive": True, "time_min": 2, "nice": 10, "comment": "sweep 7"}
    workload = api.submit(body)
    job = slurm_job(slurm, api.running_on_slurm(workload)["backend_job_id"])
    assert job["comment"] == f"ignara {workload}-1: sweep 7"
    assert (job["nice"], job["time_minimum"]) == (10, 2), job
    assert job["shared"] == "none", job  # exclusive: the node is not shared
    # Not for this gateway to pass on: refused by name, before anything is stored.
    bad = api.client.post(
        "/api/v1/workloads", json={**body, "slurm": {"account": "other"}}, headers=api.headers
    )
    assert bad.status_code == 422 and bad.json()["error"]["message"].startswith("slurm.account")
    too_long = {**body, "slurm": {"time_min": 11}}  # its time limit is 10 minutes
    bad = api.client.post("/api/v1/workloads", json=too_long, headers=api.headers)
    assert bad.status_code == 422 and bad.json()["error"]["message"].startswith("slurm.time_min")


def test_cancel_by_the_user_cancels_the_slurm_job(api: Api, slurm: SlurmCluster) -> None:
    workload = api.submit(gang("long", "sleep 300"))
    job_id = api.running_on_slurm(workload)["backend_job_id"]
    response = api.client.delete(f"/api/v1/workloads/{workload}", headers=api.headers)
    assert response.status_code == 200, response.text
    cancelled = api.until(workload, lambda w: w["state"] == "cancelled")
    assert cancelled["backend_state"] == "CANCELLED"
    assert slurm_job(slurm, job_id)["job_state"] == "CANCELLED"


def test_a_preempted_gang_is_cancelled_on_slurm_waits_and_runs_again(
    api: Api, slurm: SlurmCluster
) -> None:
    # Its first run would last; its second (after the preemption) ends by itself.
    low = api.submit(
        gang("low", 'case "$SLURM_JOB_NAME" in *-1) sleep 300;; esac; sleep 3', priority=0)
    )
    first_job = api.running_on_slurm(low)["backend_job_id"]

    high = api.submit(gang("high", "echo high; sleep 3", priority=100))
    preempted = api.until(low, lambda w: w["state"] == "pending" and w["attempt"] == 1)
    assert preempted["reason"]["code"] == "Preempted"
    api.until(low, lambda w: w["backend_state"] == "CANCELLED")
    assert slurm_job(slurm, first_job)["job_state"] == "CANCELLED"
    assert api.running_on_slurm(high)["backend_job_id"] != first_job

    api.until(high, lambda w: w["state"] == "succeeded")
    again = api.running_on_slurm(low)
    assert again["attempt"] == 2 and again["backend_job_id"] != first_job
    assert slurm_job(slurm, again["backend_job_id"])["name"] == f"{low}-2"

    # The whole story, in order, in its events, with Slurm's job ids.
    done = api.until(low, lambda w: w["state"] == "succeeded")
    events = done["events"]
    assert [(e["type"], e["attempt"]) for e in events] == [
        ("submitted", 0),
        ("admitted", 1),
        ("dispatched", 1),
        ("running", 1),
        ("preempted", 1),
        ("requeued", 1),
        ("admitted", 2),
        ("dispatched", 2),
        ("running", 2),
        ("finished", 2),
    ]
    assert events[2]["detail"] == {
        "backend": "hpc",
        "job": f"{low}-1",
        "backend_job_id": first_job,
    }
    assert events[3]["detail"]["backend_job_id"] == first_job
    assert events[4]["detail"]["by"] == high
    assert events[7]["detail"]["backend_job_id"] == again["backend_job_id"]
    assert events[9]["detail"]["exit_code"] == 0
    assert [e["type"] for e in api.get(high)["events"]][-1] == "finished"


def test_an_unreachable_slurm_makes_work_wait_never_fail_nor_run_twice(
    api: Api, slurm: SlurmCluster, relay: ThreadedRelay
) -> None:
    relay.down()
    workload = api.submit(gang("patient", "sleep 6"))
    waiting = api.until(workload, lambda w: (w["reason"] or {}).get("code") == "BackendUnavailable")
    assert (
        waiting["state"] == "admitted" and "cannot reach slurmrestd" in waiting["reason"]["message"]
    )
    relay.up()
    running = api.running_on_slurm(workload)
    relay.down()  # while it runs: the gateway cannot see it, and does not give up on it
    unseen = api.until(workload, lambda w: w["reason"]["code"] == "BackendUnavailable")
    assert unseen["state"] == "running"
    relay.up()
    done = api.until(workload, lambda w: w["state"] == "succeeded")
    assert done["backend_job_id"] == running["backend_job_id"]
    assert len(jobs_named(slurm, f"{workload}-1")) == 1
