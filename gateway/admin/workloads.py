"""``/api/v1/admin/workloads``: every tenant's workloads, for platform admins: the
listing, one workload with its events, and its cancellation.

A tenant's own keys list, read and cancel its workloads at ``/api/v1/workloads``; these
cross tenants, so each is an ``admin.*`` action (a tenant admin is refused with 403).
A cancellation is audited as a tenant's own is, with the admin as its actor."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, delete, get
from litestar.di import NamedDependency
from litestar.params import Parameter, QueryParameter

from gateway.auth import Identity
from gateway.authorization import authorize
from gateway.errors import ApiError
from gateway.openapi import errors
from gateway.services import Services
from gateway.workloads.controllers import WorkloadId, workload_detail
from gateway.workloads.schemas import WorkloadDetail, WorkloadList, WorkloadOut, WorkloadState
from tenants.config_file import NAME_PATTERN
from tenants.errors import InvalidRequestError
from tenants.services.workloads import (
    cancel_workload,
    list_every_workload,
    parse_cursor,
    tenant_of_workload,
)

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

    @get(
        "/{workload_id:str}",
        operation_id="GetAnyWorkload",
        summary="Any tenant's workload, with its events (the last 100).",
        responses=errors(403, 404),
    )
    async def read(
        self,
        request: Request[Identity, Any, Any],
        workload_id: WorkloadId,
        services: NamedDependency[Services],
    ) -> WorkloadDetail:
        await authorize(services.policy, request.user, "admin.workloads.read")
        return await workload_detail(services.database, workload_id)

    @delete(
        "/{workload_id:str}",
        operation_id="CancelAnyWorkload",
        summary="Cancel any tenant's workload (pending: at once; running: once its job stops).",
        status_code=200,
        responses=errors(403, 404),
    )
    async def cancel(
        self,
        request: Request[Identity, Any, Any],
        workload_id: WorkloadId,
        services: NamedDependency[Services],
    ) -> WorkloadOut:
        identity = request.user
        await authorize(services.policy, identity, "admin.workloads.cancel")
        async with services.database.session() as session:
            tenant = await tenant_of_workload(session, workload_id)
            # The same cancellation as the tenant's, audited under the workload's tenant
            # (so its tenant admins read it in their audit) with the admin as actor.
            row = await cancel_workload(session, tenant, workload_id, actor=identity.principal)
            return WorkloadOut.of(row)
