"""Every error leaves as JSON ``{"error": {"code", "message"}}`` with a stable code;
never a stack trace."""

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
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from quota.errors import QuotaError
from quota.resources import QuantityError
from tenants.errors import ConflictError, InvalidRequestError, NotFoundError

__all__ = ["ApiError", "error_response", "exception_handlers"]

log = logging.getLogger(__name__)


class ApiError(HTTPException):
    """An HTTP error with a stable code."""

    def __init__(self, status_code: int, code: str, message: str) -> None:
        super().__init__(status_code=status_code, detail=message)
        self.code = code


def error_response(status: int, code: str, message: str) -> Response[dict[str, Any]]:
    return Response({"error": {"code": code, "message": message}}, status_code=status)


_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "request_too_large",
    415: "unsupported_media_type",
    422: "unprocessable",
    429: "rate_limited",
}


def _http(_: Request[Any, Any, Any], exc: HTTPException) -> Response[dict[str, Any]]:
    code = getattr(exc, "code", None) or _CODES.get(exc.status_code, "error")
    message = str(exc.detail)
    if isinstance(exc, ValidationException) and exc.extra:
        message = _validation_message(exc.extra) or message
    return error_response(exc.status_code, code, message)


def _validation_message(extra: Any) -> str:
    items = extra if isinstance(extra, list) else [extra]
    parts = []
    for item in items[:5]:
        if isinstance(item, dict):
            where = item.get("key") or item.get("source") or ""
            parts.append(f"{where}: {item.get('message', '')}".strip(": "))
        else:
            parts.append(str(item))
    return "; ".join(parts)


def _domain(_: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    if isinstance(exc, NotFoundError):
        return error_response(404, "not_found", str(exc))
    if isinstance(exc, ConflictError):
        return error_response(409, "conflict", str(exc))
    return error_response(422, "invalid_request", str(exc))


def _internal(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(HTTP_500_INTERNAL_SERVER_ERROR, "internal_error", "internal error")


exception_handlers: dict[Any, Any] = {
    HTTPException: _http,
    NotAuthorizedException: _http,
    PermissionDeniedException: _http,
    NotFoundError: _domain,
    ConflictError: _domain,
    InvalidRequestError: _domain,
    QuotaError: _domain,
    QuantityError: _domain,
    HTTP_500_INTERNAL_SERVER_ERROR: _internal,
}
