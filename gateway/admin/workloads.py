"""``GET /api/v1/admin/workloads``: every tenant's workloads, for platform admins.

A tenant's own keys list its workloads at ``/api/v1/workloads``; this listing crosses
tenants, so it is an ``admin.*`` action (a tenant admin is refused with 403)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, get
from litestar.di import NamedDependency
from litestar.params import Parameter, QueryParameter

from gateway.auth import Identity
from gateway.authorization import authorize
from gateway.errors import ApiError
from gateway.openapi import errors
from gateway.services import Services
from gateway.workloads.schemas import WorkloadList, WorkloadOut, WorkloadState
from tenants.config_file import NAME_PATTERN
from tenants.errors import InvalidRequestError
from tenants.services.workloads import list_every_workload, parse_cursor

__all__ = ["AdminWorkloadController"]


class AdminWorkloadController(Controller):
    path = "/api/v1/admin/workloads"
    tags = ["admin"]

    @get("/", operation_id="ListEveryWorkload", responses=errors(400, 403))
    async def list_(
        self,
        request: Request[Identity, Any, Any],
        services: NamedDependency[Services],
        tenant: Annotated[str | None, Parameter(pattern=NAME_PATTERN)] = None,
        queue: Annotated[str | None, Parameter(pattern=NAME_PATTERN)] = None,
        state_filter: Annotated[WorkloadState | None, QueryParameter(name="state")] = None,
        limit: Annotated[int, Parameter(ge=1, le=500)] = 50,
        cursor: Annotated[str | None, Parameter(max_length=200)] = None,
    ) -> WorkloadList:
        """Every tenant's workloads, oldest first, filtered by tenant, queue and state;
        ``cursor`` is the ``next_cursor`` of the page before."""
        await authorize(services.policy, request.user, "admin.workloads.list")
        if cursor is not None:
            try:
                parse_cursor(cursor)
            except InvalidRequestError as err:
                raise ApiError(400, "invalid_request", str(err)) from None
        async with services.database.session() as session:
            page = await list_every_workload(
                session,
                tenant=tenant,
                queue=queue,
                state=state_filter.value if state_filter else None,
                limit=limit,
                cursor=cursor,
            )
            return WorkloadList([WorkloadOut.of(r) for r in page.items], page.next_cursor)
