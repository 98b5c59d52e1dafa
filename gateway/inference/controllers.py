"""``GET /v1/models``: thin, the rules live in :class:`InferenceService`. The calls
themselves (``POST /v1/chat/completions`` and the others) are served ahead of Litestar,
by :mod:`gateway.inference.routes`."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get

from gateway.inference.problems import InferenceError
from gateway.inference.service import InferenceService

__all__ = ["InferenceController"]


def _problem(_: Request[Any, Any, Any], problem: InferenceError) -> Response[bytes]:
    return Response(
        problem.body(),
        status_code=problem.status,
        headers=problem.headers,
        media_type="application/json",
    )


class InferenceController(Controller):
    path = "/v1"
    tags = ["inference"]
    exception_handlers = {InferenceError: _problem}

    @get("/models")
    async def list_models(self, request: Request[Any, Any, Any]) -> dict[str, Any]:
        """The models the caller may use."""
        names = await _service(request).models(request.user)
        return {
            "object": "list",
            "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "ignara"}
                for name in names
            ],
        }


def _service(request: Request[Any, Any, Any]) -> InferenceService:
    service: InferenceService = request.app.state["services"].inference
    return service
