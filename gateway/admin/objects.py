"""`/api/v1/admin`, one object at a time: flavors, cohorts, cluster queues, backends
(under ``/config/``: ``/api/v1/admin/cohorts`` is the cohorts' live state),
tenants and their principals, the global settings (prices, budget period, fair
sharing, inference defaults), and the audit log.

Every object answers its ``version`` (and an ``ETag``). An update or a delete names the
version it read in ``If-Match``: a stale one is refused with 412, so two admins never
overwrite each other unseen; an update without it is refused with 428, and so is a
tenant's delete (it revokes every key of the tenant and cancels its pending work: too
much to do on a name alone); another object's delete without it is allowed. A delete
is refused with 409, naming what still depends on the object. Changes go through the
services a config apply uses (tenants.services.objects), so the rules and the audit are
the same.

Only platform admins change anything here. A tenant admin reads its own tenant, its
principals, and the audit entries about them (its keys and workloads too); nothing
else (quota least of all).
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from litestar import Request, Response, delete, get, post, put
from litestar.datastructures import ResponseHeader
from litestar.di import NamedDependency
from litestar.params import HeaderParameter, JSONBody, Parameter, QueryParameter
from msgspec import Meta

from gateway.admin.controllers import AdminController
from gateway.admin.models import if_match_version
from gateway.auth import Identity
from gateway.authorization import authorize
from gateway.backends.registry import refused_secret_variable
from gateway.errors import ApiError
from gateway.openapi import errors
from gateway.services import Services
from quota.errors import QuotaError
from tenants import parse_config
from tenants.config_file import NAME_PATTERN
from tenants.models import Tenant
from tenants.services.access import PRINCIPAL_NAME
from tenants.services.objects import (
    SETTINGS_FIELDS,
    AuditQuery,
    ConfigObject,
    PrincipalRecord,
    create_principal,
    delete_object,
    delete_principal,
    delete_tenant_object,
    get_object,
    get_principal,
    list_audit,
    list_objects,
    list_principals,
    put_object,
    put_settings,
    read_settings,
    update_principal,
)
from tenants.services.tenants import live_tenants_page

__all__ = ["ObjectController"]

# The path's plural -> the object's kind, as the audit log names it.
PATH_KINDS = {
    "flavors": "flavor",
    "cohorts": "cohort",
    "cluster-queues": "cluster_queue",
    "backends": "backend",
}
KindPath = Annotated[Literal["flavors", "cohorts", "cluster-queues", "backends"], Parameter()]
Name = Annotated[str, Parameter(pattern=NAME_PATTERN)]
TenantName = Annotated[str, Parameter(pattern=NAME_PATTERN)]
PrincipalPath = Annotated[str, Parameter(pattern=PRINCIPAL_NAME)]
Limit = Annotated[int, Parameter(ge=1, le=500)]
Cursor = Annotated[str | None, Parameter(max_length=400)]
IfMatch = Annotated[
    str | None, HeaderParameter(name="If-Match", min_length=1, max_length=100, required=False)
]
Word = Annotated[str | None, Parameter(min_length=1, max_length=253)]

ETAG = [
    ResponseHeader(
        name="ETag",
        description="The object's version; send it back in If-Match to change it.",
        documentation_only=True,
    )
]


class ObjectOut(msgspec.Struct):
    kind: str
    name: str
    version: int
    spec: dict[str, Any]


class ObjectPage(msgspec.Struct):
    items: list[ObjectOut]
    next_cursor: str | None


class TenantOut(msgspec.Struct):
    name: str
    display_name: str
    queues: list[str]
    version: int


class TenantPage(msgspec.Struct):
    items: list[TenantOut]
    next_cursor: str | None


class TenantDeletedOut(msgspec.Struct):
    name: str
    keys_revoked: int
    principals_disabled: int
    workloads_cancelled: int


class PrincipalIn(msgspec.Struct, forbid_unknown_fields=True):
    name: Annotated[str, Meta(pattern=PRINCIPAL_NAME)]
    kind: Literal["user", "service-account"] = "user"


class PrincipalChange(msgspec.Struct, forbid_unknown_fields=True):
    kind: Literal["user", "service-account"]


class PrincipalOut(msgspec.Struct):
    tenant: str
    name: str
    kind: str
    version: int
    roles: list[str]  # of its live keys
    live_keys: int
    created_at: datetime


class PrincipalPage(msgspec.Struct):
    items: list[PrincipalOut]
    next_cursor: str | None


class SettingsIn(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """The settings to replace; those left out stay. ``prices: null`` removes prices."""

    fair_sharing: bool | msgspec.UnsetType = msgspec.UNSET
    budget_period: str | msgspec.UnsetType = msgspec.UNSET
    prices: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET
    inference: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET


class AuditOut(msgspec.Struct):
    id: int
    at: datetime
    actor: str
    action: str
    kind: str
    name: str
    tenant: str | None
    detail: dict[str, Any]


class AuditPage(msgspec.Struct):
    items: list[AuditOut]
    next_cursor: str | None


class ObjectController(AdminController):
    """AdminController's routes and these: Litestar refuses two controllers serving
    one path (``/tenants``), so this one extends it and is registered instead."""

    @get("/config/{kind:str}", operation_id="ListObjects", responses=errors(400))
    async def list_(
        self,
        request: Request[Identity, Any, Any],
        kind: KindPath,
        services: NamedDependency[Services],
        limit: Limit = 100,
        cursor: Cursor = None,
    ) -> ObjectPage:
        """Flavors, cohorts, cluster queues or backends by name, a page at a time."""
        await authorize(services.policy, request.user, "admin.objects.read")
        after = _decode_cursor(cursor, "n")
        async with services.database.session() as session:
            items, last = await list_objects(session, PATH_KINDS[kind], after=after, limit=limit)
        return ObjectPage([_out(o) for o in items], _encode_cursor("n", last))

    @get(
        "/config/{kind:str}/{name:str}",
        operation_id="GetObject",
        responses=errors(404),
        response_headers=ETAG,
    )
    async def get_(
        self,
        request: Request[Identity, Any, Any],
        kind: KindPath,
        name: Name,
        services: NamedDependency[Services],
    ) -> Response[ObjectOut]:
        await authorize(services.policy, request.user, "admin.objects.read")
        async with services.database.session() as session:
            found = await get_object(session, PATH_KINDS[kind], name)
        return _tagged(found)

    @post(
        "/config/{kind:str}",
        operation_id="CreateObject",
        responses=errors(409, 422),
        response_headers=ETAG,
    )
    async def create(
        self,
        request: Request[Identity, Any, Any],
        kind: KindPath,
        data: JSONBody[dict[str, Any]],
        services: NamedDependency[Services],
    ) -> Response[ObjectOut]:
        """One new object, its spec as in the config file (with its ``name``)."""
        await authorize(services.policy, request.user, "admin.objects.write")
        name = _name_in(data)
        created = await _put(services, request.user, PATH_KINDS[kind], name, data, None)
        return _tagged(created, status=201)

    @put(
        "/config/{kind:str}/{name:str}",
        operation_id="UpdateObject",
        status_code=200,
        responses=errors(404, 409, 412, 422, 428),
        response_headers=ETAG,
    )
    async def update(
        self,
        request: Request[Identity, Any, Any],
        kind: KindPath,
        name: Name,
        data: JSONBody[dict[str, Any]],
        services: NamedDependency[Services],
        if_match: IfMatch = None,
    ) -> Response[ObjectOut]:
        """Replace one object's spec; ``If-Match`` names the version read."""
        await authorize(services.policy, request.user, "admin.objects.write")
        expected = _required_version(if_match)
        _same_name(data, name)
        changed = await _put(services, request.user, PATH_KINDS[kind], name, data, expected)
        return _tagged(changed)

    @delete(
        "/config/{kind:str}/{name:str}",
        operation_id="DeleteObject",
        status_code=200,
        responses=errors(404, 409, 412),
    )
    async def remove(
        self,
        request: Request[Identity, Any, Any],
        kind: KindPath,
        name: Name,
        services: NamedDependency[Services],
        if_match: IfMatch = None,
    ) -> dict[str, str]:
        """Refused with 409 while something depends on it (a flavor a queue has quota
        for, a cohort with children or queues, a queue with admitted work or a tenant
        submitting to it, a backend a flavor runs on)."""
        await authorize(services.policy, request.user, "admin.objects.write")
        expected = _version(if_match) if if_match is not None else None
        async with services.database.session() as session:
            await delete_object(
                session, PATH_KINDS[kind], name, actor=request.user.principal, expected=expected
            )
        await services.reload_config()
        return {"deleted": name}

    # --- tenants -----------------------------------------------------------------------

    @get("/tenants", operation_id="ListTenants", responses=errors(400))
    async def tenants(
        self,
        request: Request[Identity, Any, Any],
        services: NamedDependency[Services],
        limit: Limit = 100,
        cursor: Cursor = None,
    ) -> TenantPage:
        """The live tenants by name, a page at a time (``next_cursor``: the next page's
        ``cursor``, null on the last)."""
        await authorize(services.policy, request.user, "admin.tenants.list")
        after = _decode_cursor(cursor, "t")
        async with services.database.session() as session:
            rows, last = await live_tenants_page(session, after=after, limit=limit)
        return TenantPage([_tenant_out(t) for t in rows], _encode_cursor("t", last))

    @delete(
        "/tenants/{tenant:str}",
        operation_id="DeleteTenant",
        status_code=200,
        summary="Delete a tenant: its keys revoked, principals disabled, pending work cancelled.",
        responses=errors(404, 409, 412, 428),
    )
    async def remove_tenant(
        self,
        request: Request[Identity, Any, Any],
        tenant: TenantName,
        services: NamedDependency[Services],
        if_match: IfMatch = None,
    ) -> TenantDeletedOut:
        """``If-Match`` (the version read) required. Refused with 409 while the tenant
        has admitted or running workloads. Its history stays; a config that names it
        again brings it back, without its keys."""
        await authorize(services.policy, request.user, "admin.tenants.delete")
        expected = _required_version(if_match, "a tenant's delete")
        async with services.database.session() as session:
            removal = await delete_tenant_object(
                session, tenant, actor=request.user.principal, expected=expected
            )
        await services.reload_config()  # unknown to the policies, its cached keys gone
        return TenantDeletedOut(
            removal.name,
            removal.keys_revoked,
            removal.principals_disabled,
            removal.workloads_cancelled,
        )

    @get(
        "/tenants/{tenant:str}",
        operation_id="GetTenant",
        responses=errors(404),
        response_headers=ETAG,
    )
    async def get_tenant(
        self,
        request: Request[Identity, Any, Any],
        tenant: TenantName,
        services: NamedDependency[Services],
    ) -> Response[ObjectOut]:
        """A tenant admin reads its own tenant."""
        await authorize(services.policy, request.user, "tenants.read", tenant)
        async with services.database.session() as session:
            found = await get_object(session, "tenant", tenant)
        return _tagged(found)

    @post(
        "/tenants",
        operation_id="CreateTenant",
        responses=errors(409, 422),
        response_headers=ETAG,
    )
    async def create_tenant(
        self,
        request: Request[Identity, Any, Any],
        data: JSONBody[dict[str, Any]],
        services: NamedDependency[Services],
    ) -> Response[ObjectOut]:
        await authorize(services.policy, request.user, "admin.tenants.write")
        created = await _put(services, request.user, "tenant", _name_in(data), data, None)
        return _tagged(created, status=201)

    @put(
        "/tenants/{tenant:str}",
        operation_id="UpdateTenant",
        status_code=200,
        responses=errors(404, 409, 412, 422, 428),
        response_headers=ETAG,
    )
    async def update_tenant(
        self,
        request: Request[Identity, Any, Any],
        tenant: TenantName,
        data: JSONBody[dict[str, Any]],
        services: NamedDependency[Services],
        if_match: IfMatch = None,
    ) -> Response[ObjectOut]:
        await authorize(services.policy, request.user, "admin.tenants.write")
        expected = _required_version(if_match)
        _same_name(data, tenant)
        changed = await _put(services, request.user, "tenant", tenant, data, expected)
        return _tagged(changed)

    # --- principals -------------------------------------------------------------------

    @get(
        "/tenants/{tenant:str}/principals",
        operation_id="ListPrincipals",
        responses=errors(400, 404),
    )
    async def principals(
        self,
        request: Request[Identity, Any, Any],
        tenant: TenantName,
        services: NamedDependency[Services],
        limit: Limit = 100,
        cursor: Cursor = None,
    ) -> PrincipalPage:
        """The tenant's principals, each with the roles its live keys carry."""
        await authorize(services.policy, request.user, "principals.read", tenant)
        after = _decode_cursor(cursor, "p")
        async with services.database.session() as session:
            items, last = await list_principals(session, tenant, after=after, limit=limit)
        return PrincipalPage([_principal_out(r) for r in items], _encode_cursor("p", last))

    @get(
        "/tenants/{tenant:str}/principals/{principal:str}",
        operation_id="GetPrincipal",
        responses=errors(404),
        response_headers=ETAG,
    )
    async def principal(
        self,
        request: Request[Identity, Any, Any],
        tenant: TenantName,
        principal: PrincipalPath,
        services: NamedDependency[Services],
    ) -> Response[PrincipalOut]:
        await authorize(services.policy, request.user, "principals.read", tenant)
        async with services.database.session() as session:
            record = await get_principal(session, tenant, principal)
        return _tagged_principal(record)

    @post(
        "/tenants/{tenant:str}/principals",
        operation_id="CreatePrincipal",
        responses=errors(404, 409),
        response_headers=ETAG,
    )
    async def create_principal(
        self,
        request: Request[Identity, Any, Any],
        tenant: TenantName,
        data: JSONBody[PrincipalIn],
        services: NamedDependency[Services],
    ) -> Response[PrincipalOut]:
        await authorize(services.policy, request.user, "admin.principals.write")
        async with services.database.session() as session:
            record = await create_principal(
                session, tenant, data.name, data.kind, actor=request.user.principal
            )
        return _tagged_principal(record, status=201)

    @put(
        "/tenants/{tenant:str}/principals/{principal:str}",
        operation_id="UpdatePrincipal",
        status_code=200,
        responses=errors(404, 412, 428),
        response_headers=ETAG,
    )
    async def update_principal(
        self,
        request: Request[Identity, Any, Any],
        tenant: TenantName,
        principal: PrincipalPath,
        data: JSONBody[PrincipalChange],
        services: NamedDependency[Services],
        if_match: IfMatch = None,
    ) -> Response[PrincipalOut]:
        await authorize(services.policy, request.user, "admin.principals.write")
        expected = _required_version(if_match)
        async with services.database.session() as session:
            record = await update_principal(
                session,
                tenant,
                principal,
                data.kind,
                actor=request.user.principal,
                expected=expected,
            )
        return _tagged_principal(record)

    @delete(
        "/tenants/{tenant:str}/principals/{principal:str}",
        operation_id="DeletePrincipal",
        status_code=200,
        responses=errors(404, 409, 412),
    )
    async def delete_principal(
        self,
        request: Request[Identity, Any, Any],
        tenant: TenantName,
        principal: PrincipalPath,
        services: NamedDependency[Services],
        if_match: IfMatch = None,
    ) -> dict[str, str]:
        """Refused with 409 while it holds live keys (revoke them first)."""
        await authorize(services.policy, request.user, "admin.principals.write")
        expected = _version(if_match) if if_match is not None else None
        async with services.database.session() as session:
            await delete_principal(
                session, tenant, principal, actor=request.user.principal, expected=expected
            )
        return {"deleted": principal}

    # --- settings and the audit log -----------------------------------------------------

    @get("/settings", operation_id="GetSettings", response_headers=ETAG)
    async def settings(
        self, request: Request[Identity, Any, Any], services: NamedDependency[Services]
    ) -> Response[ObjectOut]:
        """Fair sharing, the GPU-hour budget period, prices and the inference defaults."""
        await authorize(services.policy, request.user, "admin.objects.read")
        async with services.database.session() as session:
            return _tagged(await read_settings(session))

    @put(
        "/settings",
        operation_id="UpdateSettings",
        status_code=200,
        responses=errors(412, 422, 428),
        response_headers=ETAG,
    )
    async def update_settings(
        self,
        request: Request[Identity, Any, Any],
        data: JSONBody[SettingsIn],
        services: NamedDependency[Services],
        if_match: IfMatch = None,
    ) -> Response[ObjectOut]:
        await authorize(services.policy, request.user, "admin.objects.write")
        expected = _required_version(if_match)
        spec = {
            key: getattr(data, key)
            for key in SETTINGS_FIELDS
            if getattr(data, key) is not msgspec.UNSET
        }
        async with services.database.session() as session:
            changed = await put_settings(
                session, spec, actor=request.user.principal, expected=expected
            )
        await services.reload_config()
        return _tagged(changed)

    @get("/audit", operation_id="ListAudit", responses=errors(400))
    async def audit(
        self,
        request: Request[Identity, Any, Any],
        services: NamedDependency[Services],
        actor: Word = None,
        object_kind: Annotated[str | None, QueryParameter(name="kind", max_length=40)] = None,
        name: Word = None,
        action: Annotated[str | None, Parameter(max_length=40)] = None,
        tenant: Annotated[str | None, Parameter(max_length=63)] = None,
        since: Annotated[datetime | None, QueryParameter()] = None,
        until: Annotated[datetime | None, QueryParameter()] = None,
        limit: Limit = 100,
        cursor: Cursor = None,
    ) -> AuditPage:
        """Who changed what, newest first; filters combine (time: ``since`` <= at <
        ``until``, ISO 8601 with a zone). A platform admin reads every entry; a tenant
        admin only those about its own tenant, its principals, keys and workloads: its
        filters narrow that, and one naming another tenant finds nothing."""
        identity = request.user
        within: str | None = None
        if identity.is_admin:
            await authorize(services.policy, identity, "admin.audit.read")
        else:
            await authorize(services.policy, identity, "audit.read", identity.tenant)
            within = identity.tenant
        for field, moment in (("since", since), ("until", until)):
            if moment is not None and moment.tzinfo is None:
                raise ApiError(400, "invalid_request", f"{field}: give a time zone (Z or +hh:mm)")
        before_raw = _decode_cursor(cursor, "a")
        if before_raw is not None and not before_raw.isdigit():
            raise ApiError(400, "invalid_request", "cursor: not one this endpoint gave")
        query = AuditQuery(actor, object_kind, name, action, tenant, since, until, within)
        async with services.database.session() as session:
            rows, last = await list_audit(
                session,
                query,
                before=int(before_raw) if before_raw is not None else None,
                limit=limit,
            )
            items = [
                AuditOut(
                    e.id or 0, e.at, e.actor, e.action, e.kind, e.name, e.tenant, dict(e.detail)
                )
                for e in rows
            ]
        return AuditPage(items, _encode_cursor("a", str(last) if last is not None else None))


async def _put(
    services: Services,
    identity: Identity,
    kind: str,
    name: str,
    data: dict[str, Any],
    expected: int | None,
) -> ConfigObject:
    spec = {k: v for k, v in data.items() if k != "name"}
    if kind == "backend":
        _check_backend_secret(services, {**spec, "name": name})
    async with services.database.session() as session:
        changed = await put_object(
            session, kind, name, spec, actor=identity.principal, expected=expected
        )
    await services.reload_config()  # policy data, the quota tree, the models, backends
    return changed


def _check_backend_secret(services: Services, entry: dict[str, Any]) -> None:
    """The operator's rule on which variables may hold backend tokens, as on apply."""
    try:
        config = parse_config({"backends": [entry]})
    except QuotaError:
        return  # the full check (put_object) names the field at fault
    if (
        error := refused_secret_variable(config.backends, services.settings.backends.secret_rule)
    ) is not None:
        raise ApiError(422, "invalid_request", error)


def _name_in(data: dict[str, Any]) -> str:
    name = data.get("name")
    if not isinstance(name, str) or not re.match(NAME_PATTERN, name):
        raise ApiError(
            422,
            "invalid_request",
            "name: required; lower-case letters, digits and '-', at most 63 characters",
        )
    return name


def _out(found: ConfigObject) -> ObjectOut:
    return ObjectOut(found.kind, found.name, found.version, found.spec)


def _etag(version: int) -> str:
    return f'"{version}"'


def _tagged(found: ConfigObject, status: int = 200) -> Response[ObjectOut]:
    return Response(_out(found), status_code=status, headers={"ETag": _etag(found.version)})


def _tenant_out(tenant: Tenant) -> TenantOut:
    return TenantOut(tenant.name, tenant.display_name, list(tenant.queues), tenant.version)


def _principal_out(record: PrincipalRecord) -> PrincipalOut:
    p = record.principal
    return PrincipalOut(
        tenant=p.tenant or "",
        name=p.name,
        kind=p.kind,
        version=p.version,
        roles=record.roles,
        live_keys=record.live_keys,
        created_at=p.created_at,
    )


def _tagged_principal(record: PrincipalRecord, status: int = 200) -> Response[PrincipalOut]:
    return Response(
        _principal_out(record),
        status_code=status,
        headers={"ETag": _etag(record.principal.version)},
    )


def _version(if_match: str) -> int:
    return if_match_version(if_match)


def _required_version(if_match: str | None, what: str = "an update") -> int:
    if if_match is None:
        raise ApiError(
            428,
            "if_match_required",
            f"If-Match: required on {what}; send the ETag (version) the object was read with",
        )
    return _version(if_match)


def _encode_cursor(scope: str, value: str | None) -> str | None:
    if value is None:
        return None
    return base64.urlsafe_b64encode(f"{scope}:{value}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str | None, scope: str) -> str | None:
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raw = ""
    prefix, _, value = raw.partition(":")
    if prefix != scope or not value:
        raise ApiError(400, "invalid_request", "cursor: not one this endpoint gave")
    return value


def _same_name(data: dict[str, Any], name: str) -> None:
    if "name" in data and data["name"] != name:
        raise ApiError(
            422, "invalid_request", "name: differs from the path's; rename is not supported"
        )
