"""Liveness and readiness probes."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get

from gateway.services import Services


class HealthController(Controller):
    tags = ["health"]

    @get("/healthz", operation_id="Healthz", summary="The process is alive.")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @get(
        "/readyz",
        operation_id="Readyz",
        summary="Ready to serve; says whether this process runs the admission loop.",
    )
    async def readyz(self, request: Request[Any, Any, Any]) -> dict[str, str | bool]:
        services = request.app.state.get("services")
        runtime = services.runtime if isinstance(services, Services) else None
        return {"status": "ready", "admission_leader": bool(runtime and runtime.lock.held)}
