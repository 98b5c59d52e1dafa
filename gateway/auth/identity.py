"""Who is calling: the one value authentication hands to the rest of the gateway."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["ANY_TENANT", "AuthMethod", "Identity"]

AuthMethod = Literal["api-key", "oidc", "bootstrap"]
"""How the caller proved who it is."""

ANY_TENANT = "*"
"""The tenant of the bootstrap admin. It must name no real tenant (OIDC tenant claims of
``*`` are refused, and ``tenants/`` must not allow it as a name), so a plain
``identity.tenant == resource.tenant`` check never matches it; only the ``admin`` role
lets the bootstrap admin act across tenants."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """An authenticated caller.

    ``principal`` is the user or service account (the API key's principal, or the
    token's ``sub``); ``key_id`` is the public id of the API key used, if any, for audit.
    ``scopes`` are all the caller may do within its roles: an empty set allows nothing.
    """

    tenant: str
    principal: str
    roles: frozenset[str] = frozenset()
    scopes: frozenset[str] = frozenset()
    via: AuthMethod
    key_id: str | None = field(default=None, compare=False)
    # The API key's own token limits (resource -> tokens), a level below its queue.
    key_limits: tuple[tuple[str, int], ...] = field(default=(), compare=False)

    def has_role(self, role: str) -> bool:
        return role in self.roles

    @property
    def is_admin(self) -> bool:
        """A platform admin: the admin role on a principal of no tenant (a tenant's
        principal claiming the role is no admin, as the policy says too)."""
        return "admin" in self.roles and self.tenant == ANY_TENANT
