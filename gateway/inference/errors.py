"""Errors raised by the model registry and the upstream client.

Hierarchy::

    RegistryError (ValueError)        bad registry configuration
    UpstreamError                     an upstream call failed; carries ``code`` and ``http_status``
    ├── UpstreamUnavailable           every endpoint failed before a response started (502)
    ├── UpstreamTimeout               the upstream did not answer in time (504)
    └── UpstreamStreamBroken          a started response was cut off (502); never retried
"""

from __future__ import annotations

__all__ = [
    "RegistryError",
    "UpstreamError",
    "UpstreamStreamBroken",
    "UpstreamTimeout",
    "UpstreamUnavailable",
]


class RegistryError(ValueError):
    """The model registry configuration is invalid; the message names the offending entry."""


class UpstreamError(Exception):
    """Base of upstream failures: a stable ``code`` and the ``http_status`` the gateway sends."""

    code: str = "upstream_error"
    http_status: int = 502

    def __init__(self, message: str, *, attempts: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        # One short line per endpoint tried ("http://host/v1: connect error"); no secrets.
        self.attempts = attempts


class UpstreamUnavailable(UpstreamError):  # noqa: N818 (names are the public contract)
    """Raised when every endpoint of a model failed before any response started."""

    code = "upstream_unavailable"
    http_status = 502


class UpstreamTimeout(UpstreamError):  # noqa: N818 (names are the public contract)
    """Raised when the upstream timed out: before headers on every endpoint, or past the total."""

    code = "upstream_timeout"
    http_status = 504


class UpstreamStreamBroken(UpstreamError):  # noqa: N818 (names are the public contract)
    """Raised while reading a response body that the upstream cut off mid-way."""

    code = "upstream_stream_broken"
    http_status = 502
