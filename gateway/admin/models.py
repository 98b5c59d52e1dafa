"""The model registry, one model at a time: list (with endpoint health), put, delete.

A change goes through the same path as a config file (validated, applied in one
transaction, audited), so the registry has one source of truth: the stored config."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, Response, delete, get, put
from litestar.datastructures import ResponseHeader
from litestar.di import NamedDependency
from litestar.params import FromPath, HeaderParameter, JSONBody

from gateway.auth import Identity
from gateway.authorization import authorize
from gateway.errors import ApiError
from gateway.inference.catalog import refused_key_variable
from gateway.openapi import errors
from gateway.services import Services
from gateway.settings import UpstreamKeyRule
from tenants.config_file import EndpointDoc, ModelDoc
from tenants.model_checks import model_name_error
from tenants.services import export_config
from tenants.services.config import serialize_config_changes
from tenants.services.objects import delete_object, get_object, model_names, put_object

__all__ = ["ModelController", "check_key_variables", "if_match_version"]


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

    @get(
        "/{path:path}",
        operation_id="GetModel",
        responses=errors(400, 404),
        response_headers=[
            ResponseHeader(name="ETag", description="The model's version.", documentation_only=True)
        ],
    )
    async def get_model(
        self,
        request: Request[Identity, Any, Any],
        path: FromPath[PurePosixPath],
        services: NamedDependency[Services],
    ) -> Response[dict[str, Any]]:
        """One model: its config entry and ``version`` (also the ``ETag``)."""
        await authorize(services.policy, request.user, "admin.models.list")
        name = _model_name(path)
        async with services.database.session() as session:
            found = await get_object(session, "model", name)
        return Response({**found.spec, "version": found.version}, headers=_etag(found.version))

    @put(
        "/{path:path}",
        operation_id="PutModel",
        status_code=200,
        responses=errors(404, 409, 412, 422, 428),
        response_headers=[
            ResponseHeader(name="ETag", description="The model's version.", documentation_only=True)
        ],
    )
    async def put_model(
        self,
        request: Request[Identity, Any, Any],
        path: FromPath[PurePosixPath],
        data: JSONBody[ModelIn],
        services: NamedDependency[Services],
        if_match: Annotated[
            str | None,
            HeaderParameter(name="If-Match", min_length=1, max_length=100, required=False),
        ] = None,
    ) -> Response[dict[str, Any]]:
        """Create one model (names may hold '/', as ``org/model``; 201), or replace it:
        as every object's update, a replace names the version read in ``If-Match`` (412
        if stale); without it, a model that exists is refused with 428, never
        overwritten unseen."""
        await authorize(services.policy, request.user, "admin.models.write")
        name = _model_name(path)
        expected = if_match_version(if_match) if if_match is not None else None
        check_key_variables(
            [ModelDoc(name, data.flavor, data.endpoints)], services.settings.inference.key_rule
        )
        async with services.database.session() as session:
            # Held to the end: no other change between the check and the write.
            await serialize_config_changes(session)
            if expected is None and name in await model_names(session):
                raise ApiError(
                    428,
                    "if_match_required",
                    f"model {name!r} exists: If-Match is required to replace it; send the "
                    "ETag (version) it was read with",
                )
            changed = await put_object(
                session,
                "model",
                name,
                msgspec.to_builtins(data),
                actor=request.user.principal,
                expected=expected,
            )
        await services.reload_config()
        return Response(
            {**changed.spec, "version": changed.version},
            status_code=201 if expected is None else 200,
            headers=_etag(changed.version),
        )

    @delete(
        "/{path:path}",
        operation_id="DeleteModel",
        status_code=200,
        responses=errors(404, 409, 412),
    )
    async def delete_model(
        self,
        request: Request[Identity, Any, Any],
        path: FromPath[PurePosixPath],
        services: NamedDependency[Services],
        if_match: Annotated[
            str | None,
            HeaderParameter(name="If-Match", min_length=1, max_length=100, required=False),
        ] = None,
    ) -> dict[str, str]:
        """Remove one model (refused with 409 while a tenant's allow-list names it)."""
        await authorize(services.policy, request.user, "admin.models.write")
        name = _model_name(path)
        expected = if_match_version(if_match) if if_match is not None else None
        async with services.database.session() as session:
            await delete_object(
                session, "model", name, actor=request.user.principal, expected=expected
            )
        await services.reload_config()
        return {"deleted": name}


def _model_name(path: PurePosixPath) -> str:
    name = str(path).lstrip("/")
    if (error := model_name_error(name)) is not None:
        raise ApiError(400, "invalid_request", error)
    return name


def _etag(version: int) -> dict[str, str]:
    return {"ETag": f'"{version}"'}


_VERSION = re.compile(r'^(?:W/)?"?([0-9]{1,18})"?$')


def if_match_version(if_match: str) -> int:
    """The version an ``If-Match`` names (``"3"``, ``W/"3"`` or ``3``); 400 otherwise."""
    match = _VERSION.match(if_match.strip())
    if match is None:
        raise ApiError(
            400, "invalid_request", 'If-Match: the ETag the object was read with, as "3"'
        )
    return int(match.group(1))


def check_key_variables(models: list[ModelDoc], rule: UpstreamKeyRule) -> None:
    """422 when an endpoint names a variable the operator does not let go upstream."""
    if (error := refused_key_variable(models, rule)) is not None:
        raise ApiError(422, "invalid_request", error)
