"""Errors raised by the tenants services.

TenantsError
 +-- NotFound      the named object does not exist
 +-- Conflict      the change contradicts existing state (e.g. a queue holds admitted work)
 +-- StaleVersion  an update names a version of the object that is no longer current
"""

from __future__ import annotations

__all__ = [
    "ConflictError",
    "InvalidRequestError",
    "NotFoundError",
    "StaleVersionError",
    "TenantsError",
]


class TenantsError(Exception):
    """Base of every error the tenants services raise on purpose."""


class NotFoundError(TenantsError):
    pass


class ConflictError(TenantsError):
    pass


class InvalidRequestError(TenantsError):
    pass


class StaleVersionError(TenantsError):
    """The caller read another version than the current one (answered 412)."""

    def __init__(self, message: str, current: int) -> None:
        super().__init__(message)
        self.current = current
