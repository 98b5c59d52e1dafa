"""The summary endpoint is in the OpenAPI document, with its shape."""

from __future__ import annotations

from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import Settings


def test_the_summary_is_documented(settings: Settings) -> None:
    with TestClient(app=create_app(settings)) as client:
        doc = client.get("/schema/openapi.json").json()
    operation = doc["paths"]["/api/v1/admin/summary"]["get"]
    assert operation["operationId"] == "GetPlatformSummary"
    assert {"200", "403"} <= set(operation["responses"])
    fields = set(doc["components"]["schemas"]["PlatformSummary"]["properties"])
    assert {"queues", "admitted", "pending", "resources", "most_pending"} <= fields
