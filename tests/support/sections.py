"""A gateway (in this process) whose `h100` flavor sends work to one declared backend that
need not answer: for checking what POST /api/v1/workloads accepts in a backend's section,
which happens before anything is stored or sent."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import Settings
from tests.conftest import ADMIN_KEY
from tests.slurm.test_slurm_gateway import Api
from tests.support.gangs import gang_config

__all__ = ["gateway_for"]


@contextmanager
def gateway_for(settings: Settings, backend: dict[str, Any]) -> Iterator[Api]:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with TestClient(app=create_app(settings)) as client:
        applied = client.post("/api/v1/admin/config", json=gang_config(backend), headers=admin)
        assert applied.status_code == 201, applied.text
        issued = client.post(
            "/api/v1/admin/tenants/alpha/keys",
            json={"principal": "alpha-bot", "roles": ["member"]},
            headers=admin,
        )
        assert issued.status_code == 201, issued.text
        yield Api(client, issued.json()["token"])
