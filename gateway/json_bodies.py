"""JSON request bodies of the Litestar routes: a body that is not valid UTF-8, nests
deeper than :data:`MAX_JSON_DEPTH` or holds a NUL character is the caller's error (a
400 that says where), not ours.

msgspec, which Litestar decodes with, checks UTF-8 inside strings by raising
:class:`UnicodeDecodeError` and bounds nesting by raising :class:`RecursionError` at
Python's recursion limit (less the stack in use); Litestar lets both through as
500s. The bound here is far lower than msgspec's, because a document that decodes
near the limit may still overflow the stack later, deeper in the handler (a
conversion, the database's JSON serializer); no route's document nests half as deep.
NUL (``\\u0000``) is refused because PostgreSQL's text columns cannot hold it and a
job's command line cannot carry it; no field means anything by it.

Mount it with ``Litestar(request_class=GatewayRequest)``.
"""

from __future__ import annotations

from typing import Any

from litestar import Request

from gateway.errors import ApiError

__all__ = ["MAX_JSON_DEPTH", "GatewayRequest", "check_document"]

MAX_JSON_DEPTH = 32


class GatewayRequest(Request[Any, Any, Any]):
    """Litestar's request, refusing bodies :func:`check_document` refuses with a 400."""

    async def json(self) -> Any:
        try:
            document = await super().json()
        except RecursionError:
            raise _too_deep() from None
        except UnicodeDecodeError as err:
            raise _invalid(f"the body is not valid UTF-8 (byte {err.start})") from None
        check_document(document)
        return document


def check_document(document: Any) -> None:
    """Raise a 400 if ``document`` (decoded JSON) nests arrays or objects more than
    :data:`MAX_JSON_DEPTH` deep or holds a NUL in a string. Walked one level at a time,
    so a deep document cannot exhaust the stack here."""
    if _has_nul(document):
        raise _nul_at("")
    level: list[tuple[str, Any]] = [("", document)] if isinstance(document, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            raise _too_deep()
        inner: list[tuple[str, Any]] = []
        for path, value in level:
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if _has_nul(key):
                    raise _nul_at(f"{path or 'the body'}, in a key")
                where = f"{path}.{key}".lstrip(".") if isinstance(key, str) else f"{path}[{key}]"
                if _has_nul(item):
                    raise _nul_at(where)
                if isinstance(item, dict | list):
                    inner.append((where, item))
        level = inner


def _has_nul(value: Any) -> bool:
    return isinstance(value, str) and "\x00" in value


def _invalid(message: str) -> ApiError:
    return ApiError(400, "invalid_request", message)


def _too_deep() -> ApiError:
    return _invalid(f"the JSON body nests arrays or objects over {MAX_JSON_DEPTH} deep")


def _nul_at(where: str) -> ApiError:
    return _invalid(f"{where or 'the body'}: NUL characters (\\u0000) are not accepted")
