"""Errors of the ``/v1`` routes, in OpenAI's shape so OpenAI clients handle them:
``{"error": {"message", "type", "param", "code"}}`` (plus ``ignara`` details). ``code``
is never null, as on every other route: by default it is the status's generic one."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.errors import error_code

__all__ = ["InferenceError"]

_encoder = msgspec.json.Encoder()


class InferenceError(Exception):
    """A refusal or failure answered to the caller; never a stack trace."""

    def __init__(
        self,
        status: int,
        type_: str,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message
        self.code = code
        self.param = param
        self.headers = headers or {}
        self.detail = detail

    def body(self) -> bytes:
        error: dict[str, Any] = {
            "message": self.message,
            "type": self.type,
            "param": self.param,
            "code": self.code or error_code(self.status),
        }
        if self.detail is not None:
            error["ignara"] = self.detail
        return _encoder.encode({"error": error})
