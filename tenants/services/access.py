"""Who may do what: the roles a key carries and the scopes that narrow it.

Roles, lowest to highest (a higher role may do all a lower one may):

=============  ==========================================================================
member         a tenant's principal: spends its tenant's quota, reads its own things
tenant-admin   also lists its tenant's keys and creates and revokes its *member* keys
admin          platform admin: the admin routes and every tenant's keys; only on a
               platform key, which belongs to no tenant
=============  ==========================================================================

Scopes narrow one key within what its roles allow; the policy
(``policies/rego/authz.rego``) maps each action to the one scope it needs:

===============  ====================================================================
inference        ``/v1/*``: call models, list them
workloads:read   list, read, read the logs of workloads
workloads:write  submit and cancel workloads
usage:read       ``/api/v1/usage``
keys:read        list a tenant's keys
keys:write       create and revoke a tenant's keys
admin            ``/api/v1/admin/*`` except tenant keys (config, tenants, models,
                 platform keys)
===============  ====================================================================

This module checks and defaults roles and scopes when a key is issued.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from tenants.errors import InvalidRequestError

__all__ = [
    "ADMIN",
    "MEMBER",
    "PRINCIPAL_NAME",
    "ROLES",
    "ROLE_SCOPES",
    "SCOPES",
    "TENANT_ADMIN",
    "TENANT_ROLES",
    "default_scopes",
    "key_roles",
    "key_scopes",
    "scopes_for",
]

MEMBER, TENANT_ADMIN, ADMIN = "member", "tenant-admin", "admin"
PRINCIPAL_NAME = r"^[a-z0-9][a-z0-9._@-]{0,199}$"  # a principal's name, as keys are issued
ROLES = (MEMBER, TENANT_ADMIN, ADMIN)
TENANT_ROLES = frozenset({MEMBER, TENANT_ADMIN})

SCOPES = (
    "inference",
    "workloads:read",
    "workloads:write",
    "usage:read",
    "keys:read",
    "keys:write",
    "admin",
)
_MEMBER_SCOPES = frozenset({"inference", "workloads:read", "workloads:write", "usage:read"})
ROLE_SCOPES: dict[str, frozenset[str]] = {
    MEMBER: _MEMBER_SCOPES,
    TENANT_ADMIN: _MEMBER_SCOPES | {"keys:read", "keys:write"},
    ADMIN: frozenset(SCOPES),
}

PLATFORM_KEY_HINT = (
    "platform admin keys belong to no tenant: create one with POST /api/v1/admin/keys "
    "or `ignara keys create --admin --principal NAME`"
)


def scopes_for(roles: Iterable[str], *, platform: bool) -> frozenset[str]:
    """Every scope ``roles`` allow: of a platform principal's, or a tenant's (whose
    ``admin`` role, as an OIDC token may claim one, allows nothing)."""
    counted = ROLES if platform else TENANT_ROLES
    return frozenset().union(*(ROLE_SCOPES[r] for r in roles if r in counted))


def default_scopes(
    roles: Iterable[str], *, platform: bool, ceiling: Collection[str] | None = None
) -> list[str]:
    """What a key with ``roles`` gets when it names no scopes: all they allow, but none
    its issuer's own scopes (``ceiling``, if any) lack."""
    allowed = scopes_for(roles, platform=platform)
    return sorted(allowed if ceiling is None else allowed & set(ceiling))


def key_roles(roles: Collection[str], *, platform: bool) -> list[str]:
    """The roles of a new key, checked: a tenant's key is ``member`` or
    ``tenant-admin``, a platform key ``admin``. Raises ``InvalidRequestError``."""
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        raise InvalidRequestError(f"roles: unknown role {unknown[0]!r}; roles are {list(ROLES)}")
    if not roles:
        raise InvalidRequestError("roles: name at least one role")
    if platform:
        if set(roles) != {ADMIN}:
            raise InvalidRequestError("roles: a platform key carries exactly the admin role")
    elif ADMIN in roles:
        raise InvalidRequestError(
            f"roles: a tenant's key cannot carry the platform role 'admin'; {PLATFORM_KEY_HINT}"
        )
    return sorted(set(roles))


def key_scopes(
    roles: Collection[str],
    asked: Collection[str] | None,
    *,
    platform: bool,
    ceiling: Collection[str] | None = None,
) -> list[str]:
    """The scopes of a new key with ``roles``: those ``asked`` (each must be known and
    allowed by the roles; an empty list is refused, it would allow nothing), or, when
    none are asked, every scope the roles allow that ``ceiling`` (the issuer's own
    scopes, if any) holds: a key never receives by default what its issuer lacks.
    Raises ``InvalidRequestError``."""
    allowed = scopes_for(roles, platform=platform)
    if asked is None:
        granted = default_scopes(roles, platform=platform, ceiling=ceiling)
        if not granted:
            raise InvalidRequestError(
                "scopes: the issuer holds none of the scopes these roles allow"
            )
        return granted
    if not asked:
        raise InvalidRequestError(
            "scopes: an empty list would allow nothing; omit scopes for every scope the roles allow"
        )
    unknown = sorted(set(asked) - set(SCOPES))
    if unknown:
        raise InvalidRequestError(
            f"scopes: unknown scope {unknown[0]!r}; scopes are {list(SCOPES)}"
        )
    beyond = sorted(set(asked) - allowed)
    if beyond:
        raise InvalidRequestError(
            f"scopes: roles {sorted(set(roles))} do not allow scope {beyond[0]!r} "
            f"(they allow {sorted(allowed)})"
        )
    return sorted(set(asked))
