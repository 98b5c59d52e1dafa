"""Every error leaves as JSON ``{"error": {"code", "message", "type"}}`` with a stable
code; never a stack trace. ``type`` is OpenAI's error category, so OpenAI clients
pointed at the ``/v1`` routes read every error the same way."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import (
    HTTPException,
    NotAuthorizedException,
    PermissionDeniedException,
    ValidationException,
)
from litestar.params import ParameterKwarg
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from gateway.outages import DATABASE_ERRORS, DATABASE_RETRY_AFTER, Outages, database_unavailable
from quota.errors import QuotaError
from quota.resources import QuantityError
from tenants.errors import ConflictError, InvalidRequestError, NotFoundError, StaleVersionError

__all__ = [
    "ApiError",
    "error_body",
    "error_code",
    "error_response",
    "error_type",
    "exception_handlers",
]

log = logging.getLogger(__name__)


class ApiError(HTTPException):
    """An HTTP error with a stable code."""

    def __init__(
        self, status_code: int, code: str, message: str, *, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(status_code=status_code, detail=message, headers=headers)
        self.code = code


_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    412: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def error_type(status: int) -> str:
    """OpenAI's error ``type`` for an HTTP status."""
    if status >= 500:
        return "api_error"
    return _TYPES.get(status, "invalid_request_error")


def error_body(status: int, code: str, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type(status), "code": code}}


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> Response[dict[str, Any]]:
    return Response(error_body(status, code, message), status_code=status, headers=headers)


_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    412: "version_mismatch",
    428: "if_match_required",
    413: "request_too_large",
    415: "unsupported_media_type",
    422: "unprocessable",
    429: "rate_limited",
}


def error_code(status: int) -> str:
    """The ``code`` of an error that has no more precise one."""
    return _CODES.get(status, "internal_error" if status >= 500 else "error")


def _http(request: Request[Any, Any, Any], exc: HTTPException) -> Response[dict[str, Any]]:
    code = getattr(exc, "code", None) or error_code(exc.status_code)
    message = str(exc.detail)
    if isinstance(exc, ValidationException) and exc.extra:
        message = _validation_message(request, exc.extra) or message
    elif exc.status_code == 405 and exc.headers and "allow" in exc.headers:
        message = f"{request.method} is not allowed here (allowed: {exc.headers['allow']})"
    # Litestar's own headers, e.g. a 405's Allow.
    return error_response(exc.status_code, code, message, exc.headers)


def _validation_message(request: Request[Any, Any, Any], extra: Any) -> str:
    items = extra if isinstance(extra, list) else [extra]
    parts = []
    for item in items[:5]:
        if isinstance(item, dict):
            where = _wire_name(request, item.get("key")) or item.get("source") or ""
            parts.append(f"{where}: {item.get('message', '')}".strip(": "))
        else:
            parts.append(str(item))
    return "; ".join(parts)


def _wire_name(request: Request[Any, Any, Any], key: Any) -> Any:
    """The name a parameter has in the request (``Idempotency-Key``, ``state``) rather
    than in the handler's signature, which is what Litestar's messages say."""
    handler = request.scope.get("route_handler")
    parameter = handler.parsed_fn_signature.parameters.get(key) if handler and key else None
    definition = getattr(parameter, "kwarg_definition", None)
    if isinstance(definition, ParameterKwarg):
        aliases = (getattr(definition, "name", None), definition.header, definition.query)
        return next((alias for alias in aliases if alias), key)
    return key


def _domain(_: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    if isinstance(exc, NotFoundError):
        return error_response(404, "not_found", str(exc))
    if isinstance(exc, ConflictError):
        return error_response(409, "conflict", str(exc))
    if isinstance(exc, StaleVersionError):
        return error_response(412, "version_mismatch", str(exc), {"etag": f'"{exc.current}"'})
    return error_response(422, "invalid_request", str(exc))


def _internal(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(HTTP_500_INTERNAL_SERVER_ERROR, "internal_error", "internal error")


def _database(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    """A 503 naming the database when it is out of reach (logged once per outage, by
    the app's :class:`Outages` when it has some); any other such error is a 500."""
    if not database_unavailable(exc):
        return _internal(request, exc)
    outages = request.app.state.get("outages")
    if isinstance(outages, Outages):
        outages.database.failed(exc)
    return error_response(
        503,
        "database_unavailable",
        "the database is unavailable; retry shortly",
        {"retry-after": DATABASE_RETRY_AFTER},
    )


exception_handlers: dict[Any, Any] = {
    HTTPException: _http,
    NotAuthorizedException: _http,
    PermissionDeniedException: _http,
    NotFoundError: _domain,
    ConflictError: _domain,
    StaleVersionError: _domain,
    InvalidRequestError: _domain,
    QuotaError: _domain,
    QuantityError: _domain,
    **dict.fromkeys(DATABASE_ERRORS, _database),
    HTTP_500_INTERNAL_SERVER_ERROR: _internal,
}
