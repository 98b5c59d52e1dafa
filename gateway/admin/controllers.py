"""`/api/v1/admin`: API keys and the declarative quota config (tenants:
:mod:`gateway.admin.objects`). Every change
is audited by the services; these handlers only check who may ask.

A key's roles and scopes are fixed when it is issued; to change them, issue a new key
and revoke the old one. Its own token limits (``limits``: ``tokens-per-minute``,
``tokens-per-day``) are set when it is issued and changed by whoever may revoke it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import JSONBody, Parameter
from msgspec import Meta

from gateway.admin.key_activity import KeyActivityOut, keys_out
from gateway.admin.models import check_key_variables
from gateway.auth import Identity
from gateway.auth.issue import MAX_ROTATION_GRACE, issue_api_key, rotate_api_key_secret
from gateway.authorization import authorize
from gateway.backends.registry import refused_secret_variable
from gateway.errors import ApiError
from gateway.openapi import errors
from gateway.policy import PolicyEngine
from gateway.services import Services
from gateway.settings import AuthSettings
from tenants import Database, InvalidRequestError, parse_config
from tenants.models import ApiKey, Principal
from tenants.models._base import utcnow
from tenants.services import apply_config, export_config
from tenants.services.access import (
    ADMIN,
    MEMBER,
    PRINCIPAL_NAME,
    default_scopes,
    key_roles,
    key_scopes,
)
from tenants.services.api_keys import (
    check_key_limits,
    find_api_key,
    get_api_key,
    key_limits_of,
    list_api_keys,
    revoke_api_key,
    set_api_key_limits,
)

__all__ = ["AdminController"]

TenantName = Annotated[str, Parameter(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]
KeyId = Annotated[str, Parameter(pattern=r"^[0-9a-f]{1,40}$")]
PrincipalName = Annotated[str, Meta(pattern=PRINCIPAL_NAME)]
Scopes = Annotated[list[Annotated[str, Meta(max_length=64)]], Meta(max_length=16)]
ExpiresIn = Annotated[int, Meta(ge=60, le=2 * 365 * 86400)]
GraceSeconds = Annotated[int, Meta(ge=0, le=int(MAX_ROTATION_GRACE.total_seconds()))]


# ``{"tokens-per-minute": N, "tokens-per-day": N}``, each a whole number of tokens from 1
# to a trillion (null lifts it); checked by tenants' check_key_limits, so anything else
# is a 422 naming the field.
KeyLimits = Annotated[
    Any,
    Meta(
        description="The key's own token limits, below its queue's: tokens-per-minute "
        "and tokens-per-day (1 to 10^12; null lifts one)",
        examples=[{"tokens-per-minute": 20000, "tokens-per-day": 1000000}],
    ),
]


class KeyIn(msgspec.Struct, forbid_unknown_fields=True):
    """A tenant's key. ``scopes`` omitted: every scope the roles allow (and the
    issuer's own key holds); an empty list is refused."""

    principal: PrincipalName
    roles: Annotated[list[str], Meta(min_length=1, max_length=3)] = msgspec.field(
        default_factory=lambda: [MEMBER]
    )
    scopes: Scopes | None = None
    expires_in_seconds: ExpiresIn | None = None
    limits: KeyLimits = None


class PlatformKeyIn(msgspec.Struct, forbid_unknown_fields=True):
    """A platform admin's key: it belongs to no tenant and carries the admin role."""

    principal: PrincipalName
    scopes: Scopes | None = None
    expires_in_seconds: ExpiresIn | None = None
    limits: KeyLimits = None


class KeyLimitsIn(msgspec.Struct, forbid_unknown_fields=True):
    """Limits to set (a number) or lift (null); those not named stay."""

    limits: KeyLimits


class RotateIn(msgspec.Struct, forbid_unknown_fields=True):
    """How long the old secret keeps working after the rotation (0: not at all; at
    most 7 days)."""

    grace_seconds: GraceSeconds = 3600


class KeyOut(msgspec.Struct):
    key_id: str
    tenant: str | None  # None: a platform key
    principal: str
    roles: list[str]
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    revoked_reason: str | None = None  # e.g. expired by the tenant's idle-key policy
    rotated_at: datetime | None = None
    previous_valid_until: datetime | None = None  # the replaced secret works until then
    limits: dict[str, int] = msgspec.field(default_factory=dict)  # its own token limits
    activity: KeyActivityOut | None = None  # in listings: recent use, idle, anomalous
    token: str | None = None  # shown once, at creation and rotation


class ApplyOut(msgspec.Struct):
    created: list[str]
    updated: list[str]
    deleted: list[str]


class AdminController(Controller):
    path = "/api/v1/admin"
    tags = ["admin"]

    @post(
        "/config",
        operation_id="ApplyConfig",
        summary="Apply a declarative config.",
        responses=errors(409, 422),
    )
    async def apply(
        self,
        request: Request[Identity, Any, Any],
        data: JSONBody[dict[str, Any]],
        services: NamedDependency[Services],
    ) -> ApplyOut:
        """Make the stored config what ``data`` says; tenants it leaves out are deleted
        (refused with 409 while one has admitted or running workloads)."""
        await authorize(services.policy, request.user, "admin.config.apply")
        config = parse_config(data)
        check_key_variables(config.models, services.settings.inference.key_rule)
        if (
            error := refused_secret_variable(
                config.backends, services.settings.backends.secret_rule
            )
        ) is not None:
            raise ApiError(422, "invalid_request", error)
        async with services.database.session() as session:
            report = await apply_config(session, config, actor=request.user.principal)
        if report.changed:
            await services.reload_config()  # policy data, the quota tree, the models, keys
        return ApplyOut(report.created, report.updated, report.deleted)

    @get("/config", operation_id="GetConfig", summary="The current config, as a file says it.")
    async def read_config(
        self,
        request: Request[Identity, Any, Any],
        database: NamedDependency[Database],
        policy: NamedDependency[PolicyEngine],
    ) -> dict[str, Any]:
        await authorize(policy, request.user, "admin.config.read")
        async with database.session() as session:
            return await export_config(session)

    @post("/tenants/{tenant:str}/keys", operation_id="CreateApiKey", responses=errors(404))
    async def create_key(
        self,
        request: Request[Identity, Any, Any],
        tenant: TenantName,
        data: JSONBody[KeyIn],
        pepper: NamedDependency[bytes],
        services: NamedDependency[Services],
    ) -> KeyOut:
        """A key of the tenant: ``member`` or ``tenant-admin`` (a tenant admin issues
        member keys only). The platform role is refused here: see ``POST /keys``."""
        identity = request.user
        asked = (
            data.scopes
            if data.scopes is not None
            else default_scopes(data.roles, platform=False, ceiling=identity.scopes)
        )
        await authorize(
            services.policy, identity, "keys.create", tenant, roles=data.roles, scopes=asked
        )
        return await _issue(services, pepper, identity, tenant, data.principal, data)

    @get("/tenants/{tenant:str}/keys", operation_id="ListApiKeys")
    async def list_keys(
        self,
        request: Request[Identity, Any, Any],
        tenant: TenantName,
        services: NamedDependency[Services],
    ) -> list[KeyOut]:
        await authorize(services.policy, request.user, "keys.list", tenant)
        async with services.database.session() as session:
            records = await list_api_keys(session, tenant)
            return await _listed(session, records, services.settings.auth)

    @get(
        "/tenants/{tenant:str}/keys/{key_id:str}",
        operation_id="GetApiKey",
        responses=errors(404),
    )
    async def get_key(
        self,
        request: Request[Identity, Any, Any],
        tenant: TenantName,
        key_id: KeyId,
        services: NamedDependency[Services],
    ) -> KeyOut:
        await authorize(services.policy, request.user, "keys.list", tenant)
        async with services.database.session() as session:
            key, principal = await get_api_key(session, tenant, key_id)
        return _key_out(key, principal)

    @patch(
        "/tenants/{tenant:str}/keys/{key_id:str}",
        operation_id="UpdateApiKeyLimits",
        summary="Set or lift a tenant's key's own token limits.",
        responses=errors(404, 409, 422),
    )
    async def update_key(
        self,
        request: Request[Identity, Any, Any],
        tenant: TenantName,
        key_id: KeyId,
        data: JSONBody[KeyLimitsIn],
        services: NamedDependency[Services],
    ) -> KeyOut:
        """Who may revoke a key may change its limits: a tenant admin its tenant's member
        keys (so no key raises its own), a platform admin any."""
        await authorize(services.policy, request.user, "keys.revoke", tenant, roles=[MEMBER])
        limits = check_key_limits(data.limits)
        return await _limit(services, request.user, tenant, key_id, limits, platform=False)

    @patch(
        "/keys/{key_id:str}",
        operation_id="UpdateAnyApiKeyLimits",
        summary="Set or lift any key's own token limits (platform admin).",
        responses=errors(404, 409, 422),
    )
    async def update_any_key(
        self,
        request: Request[Identity, Any, Any],
        key_id: KeyId,
        data: JSONBody[KeyLimitsIn],
        services: NamedDependency[Services],
    ) -> KeyOut:
        await authorize(services.policy, request.user, "admin.keys.revoke", roles=[ADMIN])
        limits = check_key_limits(data.limits)
        async with services.database.session() as session:
            found = await find_api_key(session, key_id)
        tenant = None if found is None else found[0].tenant
        return await _limit(services, request.user, tenant, key_id, limits, platform=True)

    @delete(
        "/tenants/{tenant:str}/keys/{key_id:str}",
        operation_id="RevokeApiKey",
        status_code=200,
        responses=errors(404),
    )
    async def revoke_key(
        self,
        request: Request[Identity, Any, Any],
        tenant: TenantName,
        key_id: KeyId,
        services: NamedDependency[Services],
    ) -> KeyOut:
        """A tenant admin revokes member keys of its tenant only."""
        # First whether the caller may revoke any key here at all (the least one, a
        # member's), so a caller who may not learns nothing of which keys exist.
        await authorize(services.policy, request.user, "keys.revoke", tenant, roles=[MEMBER])
        return await _revoke(services, request.user, tenant, key_id, "keys.revoke")

    @post("/keys", operation_id="CreatePlatformKey")
    async def create_platform_key(
        self,
        request: Request[Identity, Any, Any],
        data: JSONBody[PlatformKeyIn],
        pepper: NamedDependency[bytes],
        services: NamedDependency[Services],
    ) -> KeyOut:
        """A platform admin's key (role ``admin``, no tenant), by a platform admin."""
        identity = request.user
        asked = (
            data.scopes
            if data.scopes is not None
            else default_scopes([ADMIN], platform=True, ceiling=identity.scopes)
        )
        await authorize(services.policy, identity, "admin.keys.create", roles=[ADMIN], scopes=asked)
        return await _issue(services, pepper, identity, None, data.principal, data)

    @get("/keys", operation_id="ListPlatformKeys")
    async def list_platform_keys(
        self, request: Request[Identity, Any, Any], services: NamedDependency[Services]
    ) -> list[KeyOut]:
        await authorize(services.policy, request.user, "admin.keys.list")
        async with services.database.session() as session:
            records = await list_api_keys(session, None)
            return await _listed(session, records, services.settings.auth)

    @delete(
        "/keys/{key_id:str}",
        operation_id="RevokePlatformKey",
        status_code=200,
        responses=errors(404),
    )
    async def revoke_platform_key(
        self,
        request: Request[Identity, Any, Any],
        key_id: KeyId,
        services: NamedDependency[Services],
    ) -> KeyOut:
        await authorize(services.policy, request.user, "admin.keys.revoke", roles=[ADMIN])
        return await _revoke(services, request.user, None, key_id, "admin.keys.revoke")

    @post(
        "/keys/{key_id:str}/rotate",
        operation_id="RotateApiKey",
        summary="A new secret for any key; the old one works until the grace period ends.",
        responses=errors(404, 409),
    )
    async def rotate_key(
        self,
        request: Request[Identity, Any, Any],
        key_id: KeyId,
        data: JSONBody[RotateIn],
        pepper: NamedDependency[bytes],
        services: NamedDependency[Services],
    ) -> KeyOut:
        """A platform admin rotates any key, a tenant's or a platform key: the answer
        holds the new token, shown once; the key keeps its id, roles and scopes."""
        await authorize(services.policy, request.user, "admin.keys.revoke", roles=[ADMIN])
        async with services.database.session() as session:
            found = await find_api_key(session, key_id)
        tenant = None if found is None else found[0].tenant
        return await _rotate(services, pepper, request.user, tenant, key_id, data, platform=True)

    @post(
        "/tenants/{tenant:str}/keys/{key_id:str}/rotate",
        operation_id="RotateTenantApiKey",
        summary="A new secret for a tenant's key; the old one works until the grace ends.",
        responses=errors(404, 409),
    )
    async def rotate_tenant_key(
        self,
        request: Request[Identity, Any, Any],
        tenant: TenantName,
        key_id: KeyId,
        data: JSONBody[RotateIn],
        pepper: NamedDependency[bytes],
        services: NamedDependency[Services],
    ) -> KeyOut:
        """Who may revoke a key may rotate it: a tenant admin its tenant's member keys."""
        await authorize(services.policy, request.user, "keys.revoke", tenant, roles=[MEMBER])
        return await _rotate(services, pepper, request.user, tenant, key_id, data, platform=False)


async def _issue(
    services: Services,
    pepper: bytes,
    identity: Identity,
    tenant: str | None,
    principal: str,
    data: KeyIn | PlatformKeyIn,
) -> KeyOut:
    platform = tenant is None
    limits = check_key_limits(data.limits)  # a 422 naming the field
    expires = (
        utcnow() + timedelta(seconds=data.expires_in_seconds) if data.expires_in_seconds else None
    )
    try:
        roles = key_roles(
            [ADMIN] if isinstance(data, PlatformKeyIn) else data.roles, platform=platform
        )
        scopes = key_scopes(roles, data.scopes, platform=platform, ceiling=identity.scopes)
    except InvalidRequestError as err:
        raise ApiError(400, "invalid_request", str(err)) from None
    async with services.database.session() as session:
        key, token = await issue_api_key(
            session,
            pepper,
            tenant=tenant,
            principal=principal,
            roles=roles,
            scopes=scopes,
            expires_at=expires,
            actor=identity.principal,
            limits=limits,
        )
        out = _key_out(key, principal)
    services.observe.events.info(
        "key.created",
        key_id=out.key_id,
        tenant=tenant,
        principal=principal,
        roles=sorted(roles),
        actor=identity.principal,
    )
    out.token = token
    return out


async def _limit(
    services: Services,
    identity: Identity,
    tenant: str | None,
    key_id: str,
    limits: dict[str, int | None],
    *,
    platform: bool,
) -> KeyOut:
    """Change one key's limits once the policy allows the caller to revoke a key with
    its roles; in one transaction, so the roles checked are the roles of the key changed."""
    async with services.database.session() as session:
        key, principal = await get_api_key(session, tenant, key_id)
        action = "admin.keys.revoke" if platform else "keys.revoke"
        await authorize(services.policy, identity, action, tenant, roles=list(key.roles))
        key = await set_api_key_limits(session, tenant, key_id, limits, actor=identity.principal)
        out = _key_out(key, principal)
    services.api_keys.invalidate(key_id)  # this replica applies them at once
    return out


async def _revoke(
    services: Services, identity: Identity, tenant: str | None, key_id: str, action: str
) -> KeyOut:
    """Revoke one key once the policy allows the caller to act on a key with its roles;
    in one transaction, so the roles checked are the roles revoked."""
    async with services.database.session() as session:
        key, principal = await get_api_key(session, tenant, key_id)
        await authorize(services.policy, identity, action, tenant, roles=list(key.roles))
        revoked = await revoke_api_key(session, tenant, key_id, actor=identity.principal)
        out = _key_out(revoked, principal)
    services.api_keys.invalidate(key_id)  # this replica refuses it from now on
    services.observe.events.info(
        "key.revoked",
        key_id=key_id,
        tenant=tenant,
        principal=principal.name,
        actor=identity.principal,
    )
    return out


async def _rotate(
    services: Services,
    pepper: bytes,
    identity: Identity,
    tenant: str | None,
    key_id: str,
    data: RotateIn,
    *,
    platform: bool,
) -> KeyOut:
    """Rotate one key once the policy allows the caller to revoke a key with its roles;
    in one transaction, so the roles checked are the roles of the key rotated."""
    async with services.database.session() as session:
        key, principal = await get_api_key(session, tenant, key_id)
        if platform:
            await authorize(services.policy, identity, "admin.keys.revoke", roles=list(key.roles))
        else:
            await authorize(services.policy, identity, "keys.revoke", tenant, roles=list(key.roles))
        key, token = await rotate_api_key_secret(
            session,
            pepper,
            tenant=tenant,
            key_id=key_id,
            grace=timedelta(seconds=data.grace_seconds),
            actor=identity.principal,
        )
        out = _key_out(key, principal)
    services.api_keys.invalidate(key_id)  # this replica checks the new secret at once
    services.observe.events.info(
        "key.rotated",
        key_id=key_id,
        tenant=tenant,
        principal=principal.name,
        grace_seconds=data.grace_seconds,
        actor=identity.principal,
    )
    out.token = token
    return out


async def _listed(session: Any, records: Any, auth: AuthSettings) -> list[KeyOut]:
    """Each key with its recent use and its idle and anomalous flags."""
    listed = [_key_out(*record) for record in records]
    activity = await keys_out(session, [key for key, _ in records], auth)
    for out in listed:
        out.activity = activity[out.key_id]
    return listed


def _key_out(key: ApiKey, principal: Principal | str) -> KeyOut:
    return KeyOut(
        key_id=key.key_id,
        tenant=key.tenant,
        principal=principal if isinstance(principal, str) else principal.name,
        roles=list(key.roles),
        scopes=list(key.scopes),
        created_at=key.created_at,
        expires_at=key.expires_at,
        revoked_at=key.revoked_at,
        last_used_at=key.last_used_at,
        revoked_reason=key.revoked_reason,
        rotated_at=key.rotated_at,
        previous_valid_until=key.previous_valid_until,
        limits=key_limits_of(key),
    )
