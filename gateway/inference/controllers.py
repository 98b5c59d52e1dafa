"""The OpenAI-compatible routes: thin, the rules live in :class:`InferenceService`."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.response.base import ASGIResponse
from litestar.response.streaming import ASGIStreamingResponse
from litestar.types import ASGIApp

from gateway.inference.calls import CallKind
from gateway.inference.problems import InferenceError
from gateway.inference.service import Answer, InferenceService

__all__ = ["InferenceController"]

MAX_BODY_BYTES = 8 * 1024 * 1024


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
    request_max_body_size = MAX_BODY_BYTES
    exception_handlers = {InferenceError: _problem}

    @post("/chat/completions", status_code=200)
    async def chat_completions(self, request: Request[Any, Any, Any]) -> ASGIApp:
        """Chat completions, streaming or not, as OpenAI's API."""
        return await _call(request, CallKind.CHAT)

    @post("/completions", status_code=200)
    async def completions(self, request: Request[Any, Any, Any]) -> ASGIApp:
        """Text completions, streaming or not, as OpenAI's API."""
        return await _call(request, CallKind.COMPLETIONS)

    @post("/embeddings", status_code=200)
    async def embeddings(self, request: Request[Any, Any, Any]) -> ASGIApp:
        """Embeddings, as OpenAI's API."""
        return await _call(request, CallKind.EMBEDDINGS)

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


async def _call(request: Request[Any, Any, Any], kind: CallKind) -> ASGIApp:
    """The answer as the ASGI response itself: its body is bytes already, so Litestar's
    response building (serialization, cookies, header merging) has nothing to add."""
    answer = await _service(request).handle(
        request.user, kind, await request.body(), dict(request.headers)
    )
    if isinstance(answer, Answer):
        return ASGIResponse(
            body=answer.body,
            status_code=answer.status,
            headers=answer.headers,
            media_type=answer.media_type,
        )
    return ASGIStreamingResponse(
        iterator=answer.chunks,
        status_code=answer.status,
        headers=answer.headers,
        media_type=answer.media_type,
    )
