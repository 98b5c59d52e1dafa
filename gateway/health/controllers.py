"""Liveness and readiness probes."""

from __future__ import annotations

from litestar import Controller, get


class HealthController(Controller):
    tags = ["health"]

    @get("/healthz", operation_id="Healthz", summary="The process is alive.")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @get("/readyz", operation_id="Readyz", summary="The gateway is ready to serve.")
    async def readyz(self) -> dict[str, str]:
        return {"status": "ready"}
