"""Declaring backends through the admin API: a secret variable the operator does not
allow, or a bad field, is a 422 naming the field; nothing is stored."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import Settings
from tests.conftest import ADMIN_KEY

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


QUEUE = {
    "name": "team-a",
    "resource_groups": [
        {
            "resources": ["nvidia.com/gpu"],
            "flavors": [{"name": "h100", "quotas": {"nvidia.com/gpu": {"nominal": 4}}}],
        }
    ],
}


def config(**backend: Any) -> dict[str, Any]:
    hpc = {
        "name": "hpc",
        "kind": "slurm",
        "url": "http://127.0.0.1:1",
        "token_env": "IGNARA_SLURM_TOKEN",
        **backend,
    }
    return {"flavors": [{"name": "h100", "backend": "hpc"}], "backends": [hpc]}


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient[Any]]:
    with TestClient(app=create_app(settings)) as client:
        yield client


@pytest.mark.parametrize(
    ("backend", "field"),
    [
        ({"token_env": "DATABASE_URL"}, "backends[0].token_env"),
        ({"token_env": "IGNARA_ADMIN_KEY"}, "backends[0].token_env"),
        ({"api_version": "v0.0.40"}, "backends[0].api_version"),
        ({"url": "not a url"}, "backends[0].url"),
        ({"kind": "ray", "token_env": "DATABASE_URL"}, "backends[0].token_env"),
        ({"kind": "ray", "token_env": None, "url": "gopher://x"}, "backends[0].url"),
    ],
)
def test_a_bad_backend_is_a_422_naming_the_field(
    client: TestClient[Any], backend: dict[str, Any], field: str
) -> None:
    response = client.post("/api/v1/admin/config", json=config(**backend), headers=ADMIN)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"].startswith(field)
    assert client.get("/api/v1/admin/config", headers=ADMIN).json()["backends"] == []


def test_a_declared_backend_is_served_and_exported(client: TestClient[Any]) -> None:
    response = client.post("/api/v1/admin/config", json=config(), headers=ADMIN)
    assert response.status_code == 201, response.text
    stored = client.get("/api/v1/admin/config", headers=ADMIN).json()
    assert stored["backends"][0]["name"] == "hpc"
    assert stored["flavors"] == [{"name": "h100", "backend": "hpc"}]


def test_a_workload_naming_no_backend_must_be_allowed_where_its_flavor_sends_it(
    client: TestClient[Any],
) -> None:
    body = {
        **config(),
        "cluster_queues": [QUEUE],
        "tenants": [
            {"name": "alpha", "queues": ["team-a"], "backends": ["local"]},
            {"name": "beta", "queues": ["team-a"], "backends": ["hpc"]},
        ],
    }
    assert client.post("/api/v1/admin/config", json=body, headers=ADMIN).status_code == 201
    gang = {
        "name": "g",
        "queue": "team-a",
        "pod_sets": [{"name": "w", "count": 2, "requests": {"nvidia.com/gpu": 1}}],
        "max_runtime_seconds": 60,
        "job": {"command": ["true"]},
    }
    keys = {}
    for tenant in ("alpha", "beta"):
        issued = client.post(
            f"/api/v1/admin/tenants/{tenant}/keys",
            json={"principal": f"{tenant}-bot", "roles": ["member"]},
            headers=ADMIN,
        )
        keys[tenant] = {"Authorization": f"Bearer {issued.json()['token']}"}
    # h100 sends work to hpc, which alpha may not use: refused before anything is stored.
    refused = client.post("/api/v1/workloads", json=gang, headers=keys["alpha"])
    assert refused.status_code == 403 and "hpc" in refused.json()["error"]["message"]
    accepted = client.post("/api/v1/workloads", json=gang, headers=keys["beta"])
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["backend"] is None  # decided by the flavor it is admitted on
