"""Liveness and readiness probes."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get

from gateway.errors import error_body
from gateway.health.readiness import check_readiness
from gateway.services import Services


class HealthController(Controller):
    tags = ["health"]

    @get("/healthz", operation_id="Healthz", summary="The process is alive.")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @get(
        "/readyz",
        operation_id="Readyz",
        summary="Ready to serve: the database, the token ledger's store and the policy "
        "engine answer (503 naming the one that does not); says whether this process runs "
        "the admission loop.",
    )
    async def readyz(self, request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
        services: Services = request.app.state["services"]
        readiness = await check_readiness(
            services.database, services.inference.ledger, services.policy
        )
        runtime = services.runtime
        body: dict[str, Any] = {
            "status": "ready" if readiness.ready else "not ready",
            "admission_leader": bool(runtime and runtime.lock.held),
            "checks": readiness.checks,
        }
        if readiness.ready:
            return Response(body)
        body |= error_body(503, "not_ready", f"not ready: {readiness.describe()}")
        return Response(body, status_code=503, headers={"retry-after": "1"})
