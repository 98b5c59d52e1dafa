"""The OpenAPI document says what the gateway really answers, errors included.

Litestar builds the document from the route handlers; :func:`describe_api` then
completes it once, at start-up:

- every error response (status >= 400) has the one JSON body every error has,
  the ``Error`` component (:func:`gateway.errors.error_body`; the ``/v1`` routes add
  OpenAI's ``param`` and, on a 429, ``ignara``);
- every operation that takes credentials declares the ``bearer`` scheme and its
  refusals: 401 (with ``WWW-Authenticate``), 403 (the policy) and 503 (an OIDC
  issuer's keys out of reach); every operation with parameters or a body its 400,
  and every one with a body its 413, replacing Litestar's own 400 body, which the
  gateway never sends;
- the ``/v1`` calls, served ahead of Litestar's router, are added
  (:func:`gateway.inference.openapi.call_paths`).

The errors particular to one operation (404, 409, 422, 502, ...) are declared on its
handler with :func:`errors`.
"""

from __future__ import annotations

from collections.abc import Iterator

from litestar import Litestar
from litestar.openapi.config import OpenAPIConfig
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.plugins import JsonRenderPlugin, SwaggerRenderPlugin, YamlRenderPlugin
from litestar.openapi.spec import (
    OpenAPI,
    OpenAPIHeader,
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Operation,
    Reference,
    Schema,
    SecurityScheme,
)

from gateway.inference.openapi import call_paths

__all__ = ["ERROR", "OPEN", "describe_api", "errors", "openapi_config"]

OPEN: list[dict[str, list[str]]] = [{}]
"""``security=OPEN`` on a handler: served without credentials."""

ERROR = Reference(ref="#/components/schemas/Error")

_ERROR_SCHEMA = Schema(
    type=OpenAPIType.OBJECT,
    required=["error"],
    properties={
        "error": Schema(
            type=OpenAPIType.OBJECT,
            required=["code", "message", "type"],
            properties={
                "code": Schema(type=OpenAPIType.STRING, description="Stable, for programs."),
                "message": Schema(type=OpenAPIType.STRING, description="For people."),
                "type": Schema(
                    type=OpenAPIType.STRING,
                    description="OpenAI's error category (invalid_request_error, ...).",
                ),
                "param": Schema(
                    one_of=[Schema(type=OpenAPIType.STRING), Schema(type=OpenAPIType.NULL)],
                    description="/v1 routes: the body field at fault, if one is.",
                ),
                "ignara": Schema(
                    type=OpenAPIType.OBJECT,
                    description="/v1 429s: the level, queue, flavor and resource that refused.",
                ),
            },
        )
    },
)

_DESCRIPTIONS = {
    400: "A parameter, header or the body is malformed; the message names it.",
    401: "No valid credentials: a missing, unknown, revoked or expired key or token.",
    403: "The credentials do not allow this (the policy, or the role).",
    404: "Not found, or not the caller's to see.",
    409: "Conflicts with the current state.",
    412: "A precondition of the request does not hold.",
    413: "The body is larger than this route takes.",
    422: "Well formed, but not a valid request (the message says why).",
    428: "The request must name the version it read (If-Match).",
    429: (
        "A quota or a limit refused it (the message says which); Retry-After says when to "
        "try again."
    ),
    502: "The backend or upstream failed or answered malformed.",
    503: (
        "A service the gateway needs is out of reach (the database, the token ledger, an "
        "OIDC issuer's keys): error.code names it; Retry-After says when to try again."
    ),
    504: "The upstream did not answer in time.",
}

_HEADERS: dict[int, dict[str, OpenAPIHeader | Reference]] = {
    401: {
        "WWW-Authenticate": OpenAPIHeader(
            schema=Schema(type=OpenAPIType.STRING), description="The Bearer challenge."
        )
    },
    429: {
        "Retry-After": OpenAPIHeader(
            schema=Schema(type=OpenAPIType.STRING), description="Seconds to wait."
        )
    },
    412: {
        "ETag": OpenAPIHeader(
            schema=Schema(type=OpenAPIType.STRING), description="The current version."
        )
    },
    503: {
        "Retry-After": OpenAPIHeader(
            schema=Schema(type=OpenAPIType.STRING), description="Seconds to wait."
        )
    },
}


def errors(*statuses: int) -> dict[int, ResponseSpec]:
    """The error responses a handler declares beyond the common ones; their body is
    the ``Error`` component (set by :func:`describe_api`)."""
    return {
        status: ResponseSpec(data_container=None, description=_DESCRIPTIONS[status])
        for status in statuses
    }


def openapi_config() -> OpenAPIConfig:
    return OpenAPIConfig(
        title="Ignara Gateway",
        version="0.1.0",
        path="/schema",
        security=[{"bearer": []}],
        render_plugins=[_swagger_ui(), JsonRenderPlugin(), YamlRenderPlugin()],
        description=(
            'Every error is JSON: `{"error": {"code", "message", "type"}}`. '
            "Send `Authorization: Bearer <API key or OIDC token>`."
        ),
    )


SWAGGER_UI = "/console/static/vendor/swagger-ui"
"""Swagger UI, from the pinned swagger-ui-dist package that ``make install`` copies
(gateway/console/assets): the page at ``/schema`` loads nothing from the internet."""


def _swagger_ui() -> SwaggerRenderPlugin:
    return SwaggerRenderPlugin(
        js_url=f"{SWAGGER_UI}/swagger-ui-bundle.js",
        css_url=f"{SWAGGER_UI}/swagger-ui.css",
        standalone_preset_js_url=f"{SWAGGER_UI}/swagger-ui-standalone-preset.js",
        path="/",
        favicon="",
    )


def describe_api(app: Litestar) -> None:
    """Complete the app's OpenAPI document (see the module's docstring); idempotent."""
    document = app.openapi_schema
    document.paths = {**(document.paths or {}), **call_paths()}
    components = document.components
    components.schemas = {**(components.schemas or {}), "Error": _ERROR_SCHEMA}
    components.security_schemes = {
        "bearer": SecurityScheme(
            type="http", scheme="bearer", description="An Ignara API key or an OIDC token."
        )
    }
    for operation in _operations(document):
        _complete(operation)


def _operations(document: OpenAPI) -> Iterator[Operation]:
    for item in (document.paths or {}).values():
        for method in ("get", "put", "post", "delete", "patch"):
            operation = getattr(item, method, None)
            if isinstance(operation, Operation):
                yield operation


def _complete(operation: Operation) -> None:
    responses = operation.responses = dict(operation.responses or {})
    common: list[int] = []
    if operation.parameters or operation.request_body:
        common.append(400)
        responses.pop("400", None)  # Litestar's, whose body the gateway never sends
    if operation.request_body:
        common.append(413)
    if operation.security != OPEN:
        common += [401, 403, 503]
    for code in common:
        responses.setdefault(str(code), OpenAPIResponse(description=_DESCRIPTIONS[code]))
    for key, response in responses.items():
        if key.isdigit() and int(key) >= 400 and isinstance(response, OpenAPIResponse):
            response.content = {"application/json": OpenAPIMediaType(schema=ERROR)}
            response.headers = _HEADERS.get(int(key), response.headers)
    operation.responses = dict(sorted(responses.items()))
