"""Errors raised by the tenants services.

TenantsError
 +-- NotFound      the named object does not exist
 +-- Conflict      the change contradicts existing state (e.g. a queue holds admitted work)
"""

from __future__ import annotations

__all__ = ["ConflictError", "InvalidRequestError", "NotFoundError", "TenantsError"]


class TenantsError(Exception):
    """Base of every error the tenants services raise on purpose."""


class NotFoundError(TenantsError):
    pass


class ConflictError(TenantsError):
    pass


class InvalidRequestError(TenantsError):
    pass
