"""The gateway answers its probes and publishes its OpenAPI schema."""

from __future__ import annotations

from litestar.testing import TestClient

from gateway.app import create_app


def test_healthz_and_readyz() -> None:
    with TestClient(app=create_app()) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").json() == {"status": "ready"}


def test_openapi_schema_lists_the_probes() -> None:
    with TestClient(app=create_app()) as client:
        schema = client.get("/schema/openapi.json").json()
    assert "/healthz" in schema["paths"]


def test_unknown_route_is_a_json_404() -> None:
    with TestClient(app=create_app()) as client:
        response = client.get("/nope")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")
