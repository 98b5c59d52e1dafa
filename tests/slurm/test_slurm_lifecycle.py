"""Nothing lost, nothing run twice, on a real Slurm: a real ``ignara serve`` killed with
SIGKILL between admission and dispatch, or after its submit reached Slurm but before the
answer came back; slurmctld stopped mid-run and brought back. Each time, every workload
ends exactly once on Slurm (jobs counted by name on slurmrestd), its timeline says what
happened, and the quota comes back (a gang needing all of it runs afterwards)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.slurm.helpers import TOKEN_ENV, ThreadedRelay, config, jobs_named
from tests.support.gangs import gang, until
from tests.support.gateways import gateway_processes
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("slurm_jobs")]

ADMIN_KEY = "slurm-lifecycle-bootstrap-admin-key-0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture
def relay(slurm: SlurmCluster) -> Iterator[ThreadedRelay]:
    running = ThreadedRelay(slurm.url)
    yield running
    running.close()


@pytest.fixture
def env(slurm: SlurmCluster, tmp_path: Path) -> dict[str, str]:
    return {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'ignara.db'}",
        "IGNARA_ADMIN_KEY": ADMIN_KEY,
        "IGNARA_KEY_PEPPER": "slurm-lifecycle-pepper-0123456789",
        "IGNARA_LOCAL_BACKEND_ROOT": str(tmp_path / "jobs"),
        "IGNARA_LOG_LEVEL": "warning",
        TOKEN_ENV: slurm.token,
    }


def configure(url: str, slurm: SlurmCluster, slurm_url: str, timeout: float = 2) -> dict[str, str]:
    """Apply the config (Slurm behind ``slurm_url``); a tenant key's headers."""
    body = config(slurm, slurm_url)
    body["backends"][0]["timeout_seconds"] = timeout
    with httpx.Client(base_url=url, headers=ADMIN, timeout=30) as admin:
        assert admin.post("/api/v1/admin/config", json=body).status_code == 201
        issued = admin.post(
            "/api/v1/admin/tenants/alpha/keys",
            json={"principal": "alpha-bot", "roles": ["member"]},
        )
    return {"Authorization": f"Bearer {issued.json()['token']}"}


def kill(process: Any) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


def types(workload: dict[str, Any]) -> list[str]:
    return [e["type"] for e in workload["events"]]


def test_killed_between_admission_and_dispatch(
    slurm: SlurmCluster, relay: ThreadedRelay, env: dict[str, str], tmp_path: Path
) -> None:
    relay.down()  # admitted, but the job cannot be submitted yet
    with gateway_processes(("first",), env, tmp_path) as [(url, process)]:
        key = configure(url, slurm, relay.url)
        with httpx.Client(base_url=url, headers=key, timeout=30) as http:
            workload = http.post("/api/v1/workloads", json=gang("early", "echo early")).json()
            later = http.post("/api/v1/workloads", json=gang("later", "echo later")).json()
            waiting = until(
                http,
                f"/api/v1/workloads/{workload['id']}",
                lambda w: (w["reason"] or {}).get("code") == "BackendUnavailable",
            )
            assert waiting["state"] == "admitted"
        kill(process)
    relay.up()
    with (
        gateway_processes(("second",), env, tmp_path) as [(url, _)],
        httpx.Client(base_url=url, headers=key, timeout=30) as http,
    ):
        done = until(
            http, f"/api/v1/workloads/{workload['id']}", lambda w: w["state"] == "succeeded"
        )
        assert types(done) == ["submitted", "admitted", "dispatched", "finished"] or types(
            done
        ) == ["submitted", "admitted", "dispatched", "running", "finished"]
        after = until(http, f"/api/v1/workloads/{later['id']}", lambda w: w["state"] != "pending")
        until(http, f"/api/v1/workloads/{later['id']}", lambda w: w["state"] == "succeeded")
        assert after["attempt"] == 1
    assert len(jobs_named(slurm, f"{workload['id']}-1")) == 1
    assert len(jobs_named(slurm, f"{later['id']}-1")) == 1


def test_killed_after_its_submit_reached_slurm_before_the_answer(
    slurm: SlurmCluster, relay: ThreadedRelay, env: dict[str, str], tmp_path: Path
) -> None:
    with gateway_processes(("first",), env, tmp_path) as [(url, process)]:
        # A long client timeout: the gateway waits for the held answer until it is killed.
        key = configure(url, slurm, relay.url, timeout=60)
        relay.relay.hold_replies_to = (b"POST ",)  # slurmrestd submits; its answer is held
        with httpx.Client(base_url=url, headers=key, timeout=30) as http:
            workload = http.post("/api/v1/workloads", json=gang("held", "sleep 2")).json()
            name = f"{workload['id']}-1"
            deadline = time.monotonic() + 60
            while not jobs_named(slurm, name):
                assert time.monotonic() < deadline, "the submit never reached Slurm"
                time.sleep(0.2)
            # On Slurm, and the gateway does not know it yet: the window, held open.
            assert http.get(f"/api/v1/workloads/{workload['id']}").json()["state"] == "admitted"
        kill(process)
    relay.relay.hold_replies_to = ()
    with (
        gateway_processes(("second",), env, tmp_path) as [(url, _)],
        httpx.Client(base_url=url, headers=key, timeout=30) as http,
    ):
        done = until(
            http, f"/api/v1/workloads/{workload['id']}", lambda w: w["state"] == "succeeded"
        )
        assert types(done)[:3] == ["submitted", "admitted", "adopted"]
        assert types(done)[-1] == "finished" and "dispatched" not in types(done)
        assert done["events"][2]["detail"]["backend_job_id"] == done["backend_job_id"]
        # The quota came back: a gang that needs all of it runs.
        after = http.post("/api/v1/workloads", json=gang("after", "echo after")).json()
        until(http, f"/api/v1/workloads/{after['id']}", lambda w: w["state"] == "succeeded")
    assert len(jobs_named(slurm, name)) == 1


def test_slurmctld_stopped_mid_run_makes_work_wait_then_end_once(
    slurm: SlurmCluster, env: dict[str, str], tmp_path: Path
) -> None:
    with (
        gateway_processes(("only",), env, tmp_path) as [(url, _)],
    ):
        key = configure(url, slurm, slurm.url)
        with httpx.Client(base_url=url, headers=key, timeout=30) as http:
            workload = http.post("/api/v1/workloads", json=gang("outage", "sleep 8")).json()
            path = f"/api/v1/workloads/{workload['id']}"
            running = until(http, path, lambda w: w["backend_state"] == "RUNNING")
            slurm.stop_controller()
            try:
                waiting = until(
                    http, path, lambda w: (w["reason"] or {}).get("code") == "BackendUnavailable"
                )
                assert waiting["state"] == "running"  # not failed, not lost
            finally:
                slurm.start_controller()
            done = until(http, path, lambda w: w["state"] == "succeeded")
            assert done["backend_job_id"] == running["backend_job_id"]
            assert "lost" not in types(done) and types(done).count("running") == 1
            after = http.post("/api/v1/workloads", json=gang("after", "echo after")).json()
            until(http, f"/api/v1/workloads/{after['id']}", lambda w: w["state"] == "succeeded")
    assert len(jobs_named(slurm, f"{workload['id']}-1")) == 1


def test_a_job_slurm_forgot_is_lost_and_runs_again(
    slurm: SlurmCluster, env: dict[str, str], tmp_path: Path
) -> None:
    with (
        gateway_processes(("only",), env, tmp_path) as [(url, _)],
    ):
        key = configure(url, slurm, slurm.url)
        with httpx.Client(base_url=url, headers=key, timeout=30) as http:
            command = 'case "$SLURM_JOB_NAME" in *-1) sleep 300;; esac; echo second run'
            workload = http.post("/api/v1/workloads", json=gang("amnesia", command)).json()
            path = f"/api/v1/workloads/{workload['id']}"
            running = until(http, path, lambda w: w["backend_state"] == "RUNNING")
            slurm.stop_controller()
            slurm.start_controller(forget_jobs=True)  # slurmctld lost its state
            done = until(http, path, lambda w: w["state"] == "succeeded")
            assert done["attempt"] == 2
            assert types(done)[:7] == [
                "submitted",
                "admitted",
                "dispatched",
                "running",
                "lost",
                "requeued",
                "admitted",
            ]
            # A controller just back may answer the submit after the gateway gave up on
            # it: the retry then finds (adopts) the job instead of submitting it again.
            assert types(done)[7] in ("dispatched", "adopted")
            assert types(done)[-1] == "finished" and "lost" not in types(done)[5:]
            lost = done["events"][4]["detail"]
            assert lost["backend_job_id"] == running["backend_job_id"]
            logs = http.get(f"{path}/logs")
            assert logs.text == "second run\nsecond run\n"
    assert len(jobs_named(slurm, f"{workload['id']}-2")) == 1
