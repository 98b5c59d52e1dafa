"""The gateway answers its probes and publishes its OpenAPI schema."""

from __future__ import annotations

from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import Settings


def test_healthz_and_readyz(settings: Settings) -> None:
    with TestClient(app=create_app(settings)) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = client.get("/readyz").json()
        assert ready["status"] == "ready" and isinstance(ready["admission_leader"], bool)


def test_openapi_schema_lists_the_probes(settings: Settings) -> None:
    with TestClient(app=create_app(settings)) as client:
        schema = client.get("/schema/openapi.json").json()
    paths = schema["paths"]
    assert "/healthz" in paths
    assert {"post", "get"} <= set(paths["/api/v1/workloads"])
    assert {"get", "delete"} <= set(paths["/api/v1/workloads/{workload_id}"])
    assert "/api/v1/workloads/{workload_id}/logs" in paths
    assert "/api/v1/admin/tenants/{tenant}/keys" in paths


def test_unknown_route_is_a_json_404(settings: Settings) -> None:
    with TestClient(app=create_app(settings)) as client:
        response = client.get("/nope")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")
