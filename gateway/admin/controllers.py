"""`/api/v1/admin`: tenants, API keys and the declarative quota config. Every change
is audited by the services; these handlers only check who may ask."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, delete, get, post
from litestar.di import NamedDependency
from litestar.params import JSONBody, Parameter
from msgspec import Meta
from sqlmodel import col, select

from gateway.admin.models import check_key_variables
from gateway.auth import Identity, generate_api_key, hash_secret
from gateway.authorization import authorize
from gateway.errors import ApiError
from gateway.openapi import errors
from gateway.policy import PolicyEngine
from gateway.services import Services
from tenants import Database, parse_config
from tenants.models import Tenant
from tenants.models._base import utcnow
from tenants.services import apply_config, export_config
from tenants.services.api_keys import add_api_key, list_api_keys, revoke_api_key

__all__ = ["AdminController"]

TenantName = Annotated[str, Parameter(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]


class KeyIn(msgspec.Struct, forbid_unknown_fields=True):
    principal: Annotated[str, Meta(pattern=r"^[a-z0-9][a-z0-9._@-]{0,199}$")]
    roles: Annotated[list[str], Meta(min_length=1, max_length=3)] = msgspec.field(
        default_factory=lambda: ["member"]
    )
    scopes: Annotated[list[Annotated[str, Meta(max_length=64)]], Meta(max_length=16)] = []
    expires_in_seconds: Annotated[int, Meta(ge=60, le=2 * 365 * 86400)] | None = None


class KeyOut(msgspec.Struct):
    key_id: str
    tenant: str
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    token: str | None = None  # shown once, at creation


class TenantOut(msgspec.Struct):
    name: str
    display_name: str
    queues: list[str]


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
        await authorize(services.policy, request.user, "admin.config.apply")
        config = parse_config(data)
        check_key_variables(config.models, services.settings.inference.key_rule)
        async with services.database.session() as session:
            report = await apply_config(session, config, actor=request.user.principal)
        if report.changed:
            await services.reload_config()  # policy data, the quota tree, the models
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

    @get("/tenants", operation_id="ListTenants")
    async def tenants(
        self,
        request: Request[Identity, Any, Any],
        database: NamedDependency[Database],
        policy: NamedDependency[PolicyEngine],
    ) -> list[TenantOut]:
        await authorize(policy, request.user, "admin.tenants.list")
        async with database.session() as session:
            rows = (await session.exec(select(Tenant).order_by(col(Tenant.name)))).all()
        return [TenantOut(t.name, t.display_name, list(t.queues)) for t in rows]

    @post("/tenants/{tenant:str}/keys", operation_id="CreateApiKey", responses=errors(404))
    async def create_key(
        self,
        request: Request[Identity, Any, Any],
        tenant: TenantName,
        data: JSONBody[KeyIn],
        database: NamedDependency[Database],
        pepper: NamedDependency[bytes],
        policy: NamedDependency[PolicyEngine],
    ) -> KeyOut:
        identity = request.user
        await authorize(policy, identity, "keys.create", tenant)
        if "admin" in data.roles and "admin" not in identity.roles:
            raise ApiError(403, "forbidden", "only an admin may create admin keys")
        generated = generate_api_key("live")
        expires = (
            utcnow() + timedelta(seconds=data.expires_in_seconds)
            if data.expires_in_seconds
            else None
        )
        async with database.session() as session:
            try:
                key = await add_api_key(
                    session,
                    tenant=tenant,
                    principal=data.principal,
                    roles=data.roles,
                    key_id=generated.key_id,
                    secret_hash=hash_secret(generated.secret, pepper),
                    scopes=data.scopes,
                    expires_at=expires,
                    actor=identity.principal,
                )
            except ValueError as err:
                raise ApiError(400, "invalid_request", str(err)) from None
            out = _key_out(key)
        out.token = generated.token
        return out

    @get("/tenants/{tenant:str}/keys", operation_id="ListApiKeys")
    async def list_keys(
        self,
        request: Request[Identity, Any, Any],
        tenant: TenantName,
        database: NamedDependency[Database],
        policy: NamedDependency[PolicyEngine],
    ) -> list[KeyOut]:
        await authorize(policy, request.user, "keys.list", tenant)
        async with database.session() as session:
            return [_key_out(k) for k in await list_api_keys(session, tenant)]

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
        key_id: Annotated[str, Parameter(pattern=r"^[0-9a-f]{1,40}$")],
        database: NamedDependency[Database],
        policy: NamedDependency[PolicyEngine],
        services: NamedDependency[Services],
    ) -> KeyOut:
        await authorize(policy, request.user, "keys.revoke", tenant)
        async with database.session() as session:
            revoked = await revoke_api_key(session, tenant, key_id, actor=request.user.principal)
        services.api_keys.invalidate(key_id)  # this replica refuses it from now on
        return _key_out(revoked)


def _key_out(key: Any) -> KeyOut:
    return KeyOut(
        key_id=key.key_id,
        tenant=key.tenant,
        scopes=list(key.scopes),
        created_at=key.created_at,
        expires_at=key.expires_at,
        revoked_at=key.revoked_at,
        last_used_at=key.last_used_at,
    )
