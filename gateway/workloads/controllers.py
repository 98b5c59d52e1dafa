"""`/api/v1/workloads`: submit, list, read, cancel and read the logs of one's own
tenant's training workloads."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, Response, delete, get, post
from litestar.di import NamedDependency
from litestar.params import HeaderParameter, JSONBody, Parameter, QueryParameter

from gateway.auth import Identity
from gateway.authorization import admit_by_policy, authorize
from gateway.backends import Backend, BackendError, refusal_of
from gateway.backends.sections import SectionError, check_sections
from gateway.errors import ApiError
from gateway.openapi import errors
from gateway.policy import PolicyEngine
from gateway.services import Services
from gateway.workloads.estimate import EstimateOut, estimate
from gateway.workloads.schemas import (
    WorkloadDetail,
    WorkloadIn,
    WorkloadList,
    WorkloadOut,
    WorkloadState,
)
from tenants import Database
from tenants.errors import InvalidRequestError
from tenants.services.workloads import (
    cancel_workload,
    check_submission,
    events_of,
    get_workload,
    list_workloads,
    parse_cursor,
    submit_workload,
    tenant_of_workload,
)

__all__ = ["EstimateController", "WorkloadController", "workload_detail"]

EVENTS_SHOWN = 100

WorkloadId = Annotated[str, Parameter(pattern=r"^[0-9a-f]{32}$", description="The workload's id")]


async def tenant_of(
    request: Request[Identity, Any, Any], policy: NamedDependency[PolicyEngine], action: str
) -> Identity:
    """The caller, allowed ``action`` on its own tenant's workloads. Workloads belong
    to a tenant: the bootstrap admin, of none, cannot own any."""
    identity = request.user
    if identity.tenant == "*":
        raise ApiError(403, "forbidden", "workloads belong to a tenant; use a tenant's key")
    await authorize(policy, identity, action, identity.tenant)
    return identity


def _admission_input(data: WorkloadIn, backend: str) -> dict[str, Any]:
    return {
        "name": data.name,
        "queue": data.queue,
        "backend": backend,
        "max_runtime_seconds": data.max_runtime_seconds,
        "pod_sets": [
            {"name": p.name, "count": p.count, "requests": dict(p.requests)} for p in data.pod_sets
        ],
    }


async def _checked(
    identity: Identity,
    data: WorkloadIn,
    policy: PolicyEngine,
    backends: dict[str, Backend],
    services: Services,
) -> dict[str, dict[str, Any]]:
    """Everything a submission must pass before it is stored (or estimated): its
    backend sections, the admission policy for every backend it may go to, and a
    backend that can take jobs. Returns the checked backend options."""
    # Naming no backend, it runs where its admitted flavor says: every backend its
    # queue's flavors could send it to must be open to the tenant.
    candidates = (
        [data.backend]
        if data.backend is not None
        else services.backends_for(data.queue, {r for p in data.pod_sets for r in p.requests})
    )
    try:
        options = check_sections(
            data.sections(),
            [backends[n] for n in candidates if n in backends],
            data.max_runtime_seconds,
        )
    except SectionError as err:  # before anything is stored or asked of the policy
        raise ApiError(422, "invalid_request", str(err)) from None
    for name in candidates:
        await admit_by_policy(policy, identity.tenant, _admission_input(data, name))
        backend = backends.get(name)
        # Refused now, not accepted to fail later: a local backend that cannot isolate.
        if backend is not None and (refusal := refusal_of(backend)) is not None:
            raise ApiError(409, "backend_refuses_jobs", refusal)
    return options


def _check_cursor(cursor: str) -> None:
    try:
        parse_cursor(cursor)
    except InvalidRequestError as err:  # a bad query parameter: 400, as Litestar's own
        raise ApiError(400, "invalid_request", str(err)) from None


class WorkloadController(Controller):
    path = "/api/v1/workloads"
    tags = ["workloads"]

    @post(
        "/",
        operation_id="SubmitWorkload",
        summary="Submit a training workload (a gang).",
        responses=errors(404, 409, 422),
    )
    async def submit(
        self,
        request: Request[Identity, Any, Any],
        data: JSONBody[WorkloadIn],
        database: NamedDependency[Database],
        policy: NamedDependency[PolicyEngine],
        backends: NamedDependency[dict[str, Backend]],
        services: NamedDependency[Services],
        idempotency_key: Annotated[
            str | None,
            HeaderParameter(name="Idempotency-Key", min_length=1, max_length=255, required=False),
        ] = None,
    ) -> Response[WorkloadOut]:
        with services.observe.span("workload.submit") as span:
            identity = await tenant_of(request, policy, "workloads.submit")
            options = await _checked(identity, data, policy, backends, services)
            async with database.session() as session:
                row, created = await submit_workload(
                    session,
                    identity.tenant,
                    data.to_submission(options),
                    actor=identity.principal,
                    idempotency_key=idempotency_key,
                )
                out = WorkloadOut.of(row)
            if span is not None:
                span.set_attribute("ignara.workload", row.id)
                span.set_attribute("ignara.queue", row.queue)
        if created:
            services.observe.events.info(
                "workload.submitted",
                workload=row.id,
                tenant=row.tenant,
                queue=row.queue,
                key_id=identity.key_id,
            )
        return Response(out, status_code=201 if created else 200)

    @get("/", operation_id="ListWorkloads", summary="The caller's tenant's workloads.")
    async def list_(
        self,
        request: Request[Identity, Any, Any],
        database: NamedDependency[Database],
        policy: NamedDependency[PolicyEngine],
        state_filter: Annotated[WorkloadState | None, QueryParameter(name="state")] = None,
        limit: Annotated[int, Parameter(ge=1, le=500)] = 50,
        cursor: Annotated[str | None, Parameter(max_length=200)] = None,
    ) -> WorkloadList:
        identity = await tenant_of(request, policy, "workloads.list")
        if cursor is not None:
            _check_cursor(cursor)
        async with database.session() as session:
            page = await list_workloads(
                session,
                identity.tenant,
                state=state_filter.value if state_filter else None,
                limit=limit,
                cursor=cursor,
            )
            return WorkloadList([WorkloadOut.of(r) for r in page.items], page.next_cursor)

    @get(
        "/{workload_id:str}",
        operation_id="GetWorkload",
        summary="One workload, with its events (the last 100).",
        responses=errors(404),
    )
    async def read(
        self,
        request: Request[Identity, Any, Any],
        workload_id: WorkloadId,
        database: NamedDependency[Database],
        policy: NamedDependency[PolicyEngine],
    ) -> WorkloadDetail:
        identity = await tenant_of(request, policy, "workloads.read")
        return await workload_detail(database, workload_id, identity.tenant)

    @delete(
        "/{workload_id:str}",
        operation_id="CancelWorkload",
        summary="Cancel a workload (pending: at once; running: once its job stops).",
        status_code=200,
        responses=errors(404),
    )
    async def cancel(
        self,
        request: Request[Identity, Any, Any],
        workload_id: WorkloadId,
        database: NamedDependency[Database],
        policy: NamedDependency[PolicyEngine],
    ) -> WorkloadOut:
        identity = await tenant_of(request, policy, "workloads.cancel")
        async with database.session() as session:
            row = await cancel_workload(
                session, identity.tenant, workload_id, actor=identity.principal
            )
            return WorkloadOut.of(row)

    @get(
        "/{workload_id:str}/logs",
        operation_id="WorkloadLogs",
        summary="The tail of the output of the workload's current (or last) run, or of an "
        "earlier one (attempt=N: runs are counted from 1, one per admission).",
        media_type="text/plain",
        responses=errors(404, 502),
    )
    async def logs(
        self,
        request: Request[Identity, Any, Any],
        workload_id: WorkloadId,
        database: NamedDependency[Database],
        policy: NamedDependency[PolicyEngine],
        backends: NamedDependency[dict[str, Backend]],
        tail_bytes: Annotated[int, Parameter(ge=1, le=8 * 1024 * 1024)] = 65536,
        attempt: Annotated[int | None, Parameter(ge=1, le=1_000_000)] = None,
    ) -> bytes:
        identity = await tenant_of(request, policy, "workloads.logs")
        async with database.session() as session:
            row = await get_workload(session, identity.tenant, workload_id)
        if attempt is not None and attempt > row.attempt:
            raise ApiError(
                404,
                "not_found",
                f"workload {row.id} has no run {attempt}: it has run {row.attempt} time(s)",
            )
        backend = backends.get(row.backend or row.spec.get("backend") or "local")
        if row.attempt == 0 or backend is None:
            return b""
        try:
            return await backend.logs(f"{row.id}-{attempt or row.attempt}", tail_bytes)
        except BackendError as err:
            raise ApiError(502, "backend_error", f"cannot read the logs: {err}") from None


class EstimateController(Controller):
    path = "/api/v1/workloads:estimate"
    tags = ["workloads"]

    @post(
        "/",
        operation_id="EstimateWorkload",
        summary="What would happen to this submission (same body), stored nowhere: "
        "admitted now or not and why, whom it would preempt, the GPU-hours it would commit, "
        "and when it would start (an estimate, saying what it assumes).",
        status_code=200,
        responses=errors(404, 409, 422),
    )
    async def estimate(
        self,
        request: Request[Identity, Any, Any],
        data: JSONBody[WorkloadIn],
        database: NamedDependency[Database],
        policy: NamedDependency[PolicyEngine],
        backends: NamedDependency[dict[str, Backend]],
        services: NamedDependency[Services],
    ) -> EstimateOut:
        identity = await tenant_of(request, policy, "workloads.read")
        options = await _checked(identity, data, policy, backends, services)
        submission = data.to_submission(options)
        async with database.session() as session:
            await check_submission(session, identity.tenant, submission)
        return await estimate(
            database, identity.tenant, submission, charged=services.charged_loader
        )


async def workload_detail(
    database: Database, workload_id: str, tenant: str | None = None
) -> WorkloadDetail:
    """One workload of ``tenant`` (None: of whichever tenant it is, for a platform
    admin) with its last events, read in one snapshot: the row and its events as of one
    moment (each event is written with its change, so they agree)."""
    async with database.snapshot() as session:
        if tenant is None:
            tenant = await tenant_of_workload(session, workload_id)
        row = await get_workload(session, tenant, workload_id)
        events, count = await events_of(session, row.id, limit=EVENTS_SHOWN)
        return WorkloadDetail.with_events(row, events, count)
