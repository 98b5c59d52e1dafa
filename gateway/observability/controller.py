"""``GET /metrics``: the Prometheus text exposition of this process (or, with
``PROMETHEUS_MULTIPROC_DIR``, of every worker process).

Open by default, as Prometheus scrapes usually are: it says how busy each queue,
model and tenant is, but names no key, workload or prompt. With ``IGNARA_METRICS_TOKEN``
set, a scrape must send ``Authorization: Bearer <token>`` (Prometheus'
``authorization`` scrape setting); without metrics (``IGNARA_METRICS=0``) it is a 404.
"""

from __future__ import annotations

import hmac
from typing import Any

from litestar import Controller, Request, Response, get

from gateway.errors import error_response
from gateway.openapi import OPEN, errors
from gateway.services import Services

__all__ = ["MetricsController"]

# Prometheus' text format; Litestar adds the charset (utf-8) itself.
EXPOSITION = "text/plain; version=0.0.4"


class MetricsController(Controller):
    tags = ["health"]
    security = OPEN

    @get(
        "/metrics",
        operation_id="Metrics",
        summary="Prometheus metrics (a bearer token when IGNARA_METRICS_TOKEN is set).",
        opt={"exclude_from_auth": True},
        responses=errors(401, 404),
        # Prometheus' text format, not the JSON API the OpenAPI document describes.
        include_in_schema=False,
    )
    async def metrics(self, request: Request[Any, Any, Any]) -> Response[Any]:
        services: Services = request.app.state["services"]
        metrics = services.observe.metrics
        if metrics is None:
            return error_response(404, "not_found", "metrics are off (IGNARA_METRICS=0)")
        token = services.settings.observability.metrics_token
        if token is not None and not _bearer_matches(
            request.headers.get("authorization", ""), token
        ):
            return error_response(
                401,
                "unauthorized",
                "this gateway's metrics need a bearer token",
                headers={"www-authenticate": 'Bearer realm="metrics"'},
            )
        summary = await services.live.published() if services.live is not None else None
        return Response(
            metrics.render(summary),
            media_type=EXPOSITION,
        )


def _bearer_matches(header: str, token: str) -> bool:
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )
