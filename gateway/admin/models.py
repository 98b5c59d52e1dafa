"""The model registry, one model at a time: list (with endpoint health), put, delete.

A change goes through the same path as a config file (validated, applied in one
transaction, audited), so the registry has one source of truth: the stored config."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import msgspec
from litestar import Controller, Request, delete, get, put
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from gateway.auth import Identity
from gateway.authorization import authorize
from gateway.errors import ApiError
from gateway.inference.catalog import refused_key_variable
from gateway.services import Services
from gateway.settings import UpstreamKeyRule
from quota.errors import ConfigError
from tenants import parse_config
from tenants.config_file import EndpointDoc, ModelDoc
from tenants.model_checks import model_name_error
from tenants.services import apply_config, export_config

__all__ = ["ModelController", "check_key_variables"]


class ModelIn(msgspec.Struct, forbid_unknown_fields=True):
    flavor: str
    endpoints: list[EndpointDoc]


class ModelController(Controller):
    path = "/api/v1/admin/models"
    tags = ["admin"]

    @get("", operation_id="ListModels")
    async def list_models(
        self, request: Request[Identity, Any, Any], services: NamedDependency[Services]
    ) -> list[dict[str, Any]]:
        """Every configured model; each endpoint says whether this gateway can reach it
        (active health checks) and has its key."""
        await authorize(services.policy, request.user, "admin.models.list")
        async with services.database.session() as session:
            models: list[dict[str, Any]] = (await export_config(session))["models"]
        served = services.inference.catalog.registry
        for model in models:
            route = served.route(model["name"])
            model["served"] = route is not None
            for endpoint in model["endpoints"]:
                endpoint["healthy"] = route is not None and any(
                    e.base_url == endpoint["base_url"].rstrip("/")
                    and services.upstreams.is_healthy(e)
                    for e in route.endpoints
                )
        return models

    @put("/{path:path}", operation_id="PutModel", status_code=200)
    async def put_model(
        self,
        request: Request[Identity, Any, Any],
        path: FromPath[PurePosixPath],
        data: JSONBody[ModelIn],
        services: NamedDependency[Services],
    ) -> dict[str, Any]:
        """Create or replace one model (names may hold '/', as ``org/model``)."""
        await authorize(services.policy, request.user, "admin.models.write")
        name = _model_name(path)
        entry = {"name": name, **msgspec.to_builtins(data)}

        def change(models: list[dict[str, Any]]) -> list[dict[str, Any]]:
            if any(m["name"] == name for m in models):
                return [entry if m["name"] == name else m for m in models]
            return [*models, entry]

        await _change_models(services, request.user.principal, change)
        return entry

    @delete("/{path:path}", operation_id="DeleteModel", status_code=200)
    async def delete_model(
        self,
        request: Request[Identity, Any, Any],
        path: FromPath[PurePosixPath],
        services: NamedDependency[Services],
    ) -> dict[str, str]:
        """Remove one model (refused while a tenant's allow-list names it)."""
        await authorize(services.policy, request.user, "admin.models.write")
        name = _model_name(path)

        def change(models: list[dict[str, Any]]) -> list[dict[str, Any]]:
            if not any(m["name"] == name for m in models):
                raise ApiError(404, "not_found", f"model {name!r} is not configured")
            return [m for m in models if m["name"] != name]

        await _change_models(services, request.user.principal, change)
        return {"deleted": name}


async def _change_models(services: Services, actor: str, change: Any) -> None:
    """Read the stored config, change its models, apply it back in one transaction."""
    async with services.database.session() as session:
        stored = await export_config(session)
        stored["models"] = change(stored["models"])
        try:
            config = parse_config(stored)
        except ConfigError as err:  # names the field that is wrong
            raise ApiError(409, "conflict", str(err)) from None
        check_key_variables(config.models, services.settings.inference.key_rule)
        report = await apply_config(session, config, actor=actor)
    if report.changed:
        await services.reload_config()


def _model_name(path: PurePosixPath) -> str:
    name = str(path).lstrip("/")
    if (error := model_name_error(name)) is not None:
        raise ApiError(400, "invalid_request", error)
    return name


def check_key_variables(models: list[ModelDoc], rule: UpstreamKeyRule) -> None:
    """422 when an endpoint names a variable the operator does not let go upstream."""
    if (error := refused_key_variable(models, rule)) is not None:
        raise ApiError(422, "invalid_request", error)
