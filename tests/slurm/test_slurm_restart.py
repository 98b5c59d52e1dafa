"""A real ``ignara serve`` process (its Slurm token from IGNARA_SLURM_TOKEN, as in
production) killed with SIGKILL while its gang runs on Slurm: the next gateway on the same
database follows the same Slurm job to its end, once; nothing is submitted twice and the
quota comes back."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from tests.slurm.helpers import TOKEN_ENV, config, jobs_named, slurm_job
from tests.support.gangs import gang, until
from tests.support.gateways import gateway_processes
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("slurm_jobs")]

ADMIN_KEY = "slurm-restart-bootstrap-admin-key-0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def test_a_gateway_killed_while_its_gang_runs_is_followed_by_the_next_one(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    env = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'ignara.db'}",
        "IGNARA_ADMIN_KEY": ADMIN_KEY,
        "IGNARA_KEY_PEPPER": "slurm-restart-pepper-0123456789",
        "IGNARA_LOCAL_BACKEND_ROOT": str(tmp_path / "jobs"),
        "IGNARA_LOG_LEVEL": "warning",
        TOKEN_ENV: slurm.token,
    }
    with gateway_processes(("first",), env, tmp_path) as [(url, process)]:
        with httpx.Client(base_url=url, headers=ADMIN, timeout=30) as admin:
            assert admin.post("/api/v1/admin/config", json=config(slurm)).status_code == 201
            issued = admin.post(
                "/api/v1/admin/tenants/alpha/keys",
                json={"principal": "alpha-bot", "roles": ["member"]},
            )
            key = {"Authorization": f"Bearer {issued.json()['token']}"}
        with httpx.Client(base_url=url, headers=key, timeout=30) as http:
            submitted = http.post("/api/v1/workloads", json=gang("crash", "sleep 8; echo done"))
            workload = submitted.json()["id"]
            later = http.post("/api/v1/workloads", json=gang("later", "echo later")).json()["id"]
            running = until(
                http, f"/api/v1/workloads/{workload}", lambda w: w["backend_state"] == "RUNNING"
            )
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)

    assert slurm_job(slurm, running["backend_job_id"])["job_state"] == "RUNNING"
    with (
        gateway_processes(("second",), env, tmp_path) as [(url, _)],
        httpx.Client(base_url=url, headers=key, timeout=30) as http,
    ):
        done = until(http, f"/api/v1/workloads/{workload}", lambda w: w["state"] == "succeeded")
        assert done["backend_job_id"] == running["backend_job_id"]
        assert http.get(f"/api/v1/workloads/{workload}/logs").text == "done\ndone\n"
        assert until(http, f"/api/v1/workloads/{later}", lambda w: w["state"] == "succeeded")
    assert len(jobs_named(slurm, f"{workload}-1")) == 1
    assert len(jobs_named(slurm, f"{later}-1")) == 1
