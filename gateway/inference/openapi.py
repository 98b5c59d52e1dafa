"""The OpenAPI operations of the three ``/v1`` calls. They are served by their own ASGI
app ahead of Litestar's router (:mod:`gateway.inference.routes`), so Litestar does not
see them; :func:`gateway.openapi.describe_api` adds these to its document.

The bodies are OpenAI's; what is described is what the gateway reads and checks
(:mod:`gateway.inference.calls`); every other field passes through to the upstream.
The error bodies, and the common refusals, are added by ``describe_api``.
"""

from __future__ import annotations

from litestar.openapi.spec import (
    OpenAPIHeader,
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Operation,
    PathItem,
    Reference,
    RequestBody,
    Schema,
)

from gateway.inference.calls import MAX_CHOICES, MAX_MESSAGES, MAX_MODEL_CHARS, MAX_TOKENS_CAP

__all__ = ["call_paths"]


def _string(**kw: object) -> Schema:
    return Schema(type=OpenAPIType.STRING, **kw)  # type: ignore[arg-type]


def _integer(low: int, high: int) -> Schema:
    return Schema(type=OpenAPIType.INTEGER, minimum=low, maximum=high)


_TOKEN_IDS = Schema(type=OpenAPIType.ARRAY, items=_integer(0, 2**31 - 1), min_items=1)
_INPUT = Schema(
    one_of=[
        _string(),
        Schema(type=OpenAPIType.ARRAY, items=_string(), min_items=1),
        _TOKEN_IDS,
        Schema(type=OpenAPIType.ARRAY, items=_TOKEN_IDS, min_items=1),
    ]
)
_GENERATION = {
    "max_tokens": _integer(1, MAX_TOKENS_CAP),
    "max_completion_tokens": _integer(1, MAX_TOKENS_CAP),
    "n": _integer(1, MAX_CHOICES),
    "stream": Schema(type=OpenAPIType.BOOLEAN),
    "stream_options": Schema(
        type=OpenAPIType.OBJECT, properties={"include_usage": Schema(type=OpenAPIType.BOOLEAN)}
    ),
}
_MODEL = _string(min_length=1, max_length=MAX_MODEL_CHARS, description="A configured model.")
_MESSAGE = Schema(
    type=OpenAPIType.OBJECT,
    required=["role"],
    properties={
        "role": _string(),
        "content": Schema(
            one_of=[
                _string(),
                Schema(type=OpenAPIType.ARRAY, items=Schema(type=OpenAPIType.OBJECT)),
                Schema(type=OpenAPIType.NULL),
            ]
        ),
    },
)


def _body(required: list[str], **properties: Schema | Reference) -> RequestBody:
    schema = Schema(
        type=OpenAPIType.OBJECT,
        required=required,
        properties=properties,
        description="OpenAI's request; fields not listed pass through to the upstream.",
    )
    return RequestBody(content={"application/json": OpenAPIMediaType(schema=schema)}, required=True)


_RATE_HEADERS: dict[str, OpenAPIHeader | Reference] = {
    f"x-ratelimit-{what}-{kind}": OpenAPIHeader(schema=_string(), description=description)
    for kind in ("requests", "tokens")
    for what, description in (
        ("limit", f"The queue's {kind} limit (tokens: per minute, else its budget)."),
        ("remaining", f"The {kind} left."),
        ("reset", "When they are back in full, as OpenAI writes it (1m30s)."),
    )
}


def _answered(*, streams: bool) -> OpenAPIResponse:
    content = {"application/json": OpenAPIMediaType(schema=Schema(type=OpenAPIType.OBJECT))}
    if streams:
        # Per event, as OpenAPI 3.1 reads a stream's schema: its data, a JSON chunk or [DONE].
        event = Schema(type=OpenAPIType.OBJECT, required=["data"], properties={"data": _string()})
        content["text/event-stream"] = OpenAPIMediaType(schema=event)
    return OpenAPIResponse(
        description="The upstream's answer (a stream of server-sent events when `stream`).",
        headers=_RATE_HEADERS,
        content=content,
    )


def _call(operation_id: str, summary: str, body: RequestBody, *, streams: bool) -> PathItem:
    errors = {
        "404": "The model does not exist or is not the caller's (code model_not_found).",
        "429": "A token or request quota refused the call; Retry-After says when to retry.",
        "502": "No upstream answered, or it answered malformed JSON.",
        "503": (
            "The token ledger (Redis, code ledger_unavailable) or, for a key this gateway "
            "has not read recently, the database (database_unavailable) is out of reach."
        ),
        "504": "The upstream did not answer in time.",
    }
    return PathItem(
        post=Operation(
            operation_id=operation_id,
            tags=["inference"],
            summary=summary,
            description=(
                "As OpenAI's API. An upstream's own error answer passes through unchanged."
            ),
            request_body=body,
            responses={
                "200": _answered(streams=streams),
                **{status: OpenAPIResponse(description=text) for status, text in errors.items()},
            },
        )
    )


def call_paths() -> dict[str, PathItem]:
    return {
        "/v1/chat/completions": _call(
            "CreateChatCompletion",
            "Chat completions, streamed or not.",
            _body(
                ["model", "messages"],
                model=_MODEL,
                messages=Schema(
                    type=OpenAPIType.ARRAY, items=_MESSAGE, min_items=1, max_items=MAX_MESSAGES
                ),
                **_GENERATION,
            ),
            streams=True,
        ),
        "/v1/completions": _call(
            "CreateCompletion",
            "Text completions, streamed or not.",
            _body(["model", "prompt"], model=_MODEL, prompt=_INPUT, **_GENERATION),
            streams=True,
        ),
        "/v1/embeddings": _call(
            "CreateEmbedding",
            "Embeddings.",
            _body(["model", "input"], model=_MODEL, input=_INPUT),
            streams=False,
        ),
    }
