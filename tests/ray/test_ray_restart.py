"""A real ``ignara serve`` process killed with SIGKILL while its gang runs on Ray: the next
gateway on the same database follows the same Ray job to its end, once; nothing is submitted
twice, the start the first gateway saw is kept (Ray's own start_time is the submission
time, so the second gateway cannot know it), and the quota comes back."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from tests.ray.test_ray_gateway import config
from tests.support.gangs import gang, until
from tests.support.gateways import gateway_processes
from tests.support.ray import RayHead

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ray_jobs")]

ADMIN_KEY = "ray-restart-bootstrap-admin-key-0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def test_a_gateway_killed_while_its_gang_runs_on_ray_is_followed_by_the_next_one(
    ray: RayHead, tmp_path: Path
) -> None:
    env = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'ignara.db'}",
        "IGNARA_ADMIN_KEY": ADMIN_KEY,
        "IGNARA_KEY_PEPPER": "ray-restart-pepper-0123456789",
        "IGNARA_LOCAL_BACKEND_ROOT": str(tmp_path / "jobs"),
        "IGNARA_LOG_LEVEL": "warning",
    }
    with gateway_processes(("first",), env, tmp_path) as [(url, process)]:
        with httpx.Client(base_url=url, headers=ADMIN, timeout=30) as admin:
            assert admin.post("/api/v1/admin/config", json=config(ray.url)).status_code == 201
            issued = admin.post(
                "/api/v1/admin/tenants/alpha/keys",
                json={"principal": "alpha-bot", "roles": ["member"]},
            )
            key = {"Authorization": f"Bearer {issued.json()['token']}"}
        with httpx.Client(base_url=url, headers=key, timeout=30) as http:
            submitted = http.post("/api/v1/workloads", json=gang("crash", "sleep 6; echo done"))
            workload = submitted.json()["id"]
            later = http.post("/api/v1/workloads", json=gang("later", "echo later")).json()["id"]
            running = until(
                http,
                f"/api/v1/workloads/{workload}",
                lambda w: w["backend_state"] == "RUNNING" and w["started_at"] is not None,
            )
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)

    with (
        gateway_processes(("second",), env, tmp_path) as [(url, _)],
        httpx.Client(base_url=url, headers=key, timeout=30) as http,
    ):
        done = until(http, f"/api/v1/workloads/{workload}", lambda w: w["state"] == "succeeded")
        assert done["backend_job_id"] == running["backend_job_id"] == f"{workload}-1"
        assert done["started_at"] == running["started_at"]
        assert "done" in http.get(f"/api/v1/workloads/{workload}/logs").text.splitlines()
        assert until(http, f"/api/v1/workloads/{later}", lambda w: w["state"] == "succeeded")
    submissions = [j["submission_id"] for j in ray.jobs()]
    assert submissions.count(f"{workload}-1") == 1 and submissions.count(f"{later}-1") == 1
