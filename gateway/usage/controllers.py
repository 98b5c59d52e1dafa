"""`/api/v1/usage`: the caller's tenant's inference usage per UTC day and model."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Annotated, Any

from litestar import Controller, Request, get
from litestar.di import NamedDependency
from litestar.params import Parameter

from gateway.auth import Identity
from gateway.auth.identity import ANY_TENANT
from gateway.authorization import authorize
from gateway.errors import ApiError
from gateway.policy import PolicyEngine
from gateway.usage.schemas import UsageOut
from tenants import Database
from tenants.model_checks import MODEL_NAME_PATTERN
from tenants.models._base import utcnow
from tenants.services.usage import usage_summary

__all__ = ["DEFAULT_DAYS", "EARLIEST_DAY", "LATEST_DAY", "MAX_DAYS", "UsageController"]

DEFAULT_DAYS = 30  # today and the 29 days before it
MAX_DAYS = 366  # a leap year: bounds the rows one request reads
EARLIEST_DAY, LATEST_DAY = date(1970, 1, 1), date(2999, 12, 31)

TenantName = Annotated[
    str | None,
    Parameter(
        pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
        description="Whose usage: for platform admins only (others see their own).",
    ),
]
ModelName = Annotated[
    str | None, Parameter(pattern=MODEL_NAME_PATTERN, description="Only this model.")
]
Day = Annotated[
    date | None,
    Parameter(
        description=f"A UTC day, ISO 8601 (2026-11-22), from {EARLIEST_DAY} to {LATEST_DAY}."
    ),
]


def period(start: date | None, end: date | None) -> tuple[date, date]:
    """The days asked for, both included: by default the last 30 up to today (UTC).
    Either end lies from :data:`EARLIEST_DAY` to :data:`LATEST_DAY`: no usage lies
    outside, and day arithmetic near year 1 or 9999 overflows."""
    for name, day in (("start", start), ("end", end)):
        if day is not None and not EARLIEST_DAY <= day <= LATEST_DAY:
            raise ApiError(
                400,
                "invalid_request",
                f"{name}: {day} is not from {EARLIEST_DAY} to {LATEST_DAY}",
            )
    if end is None:
        end = utcnow().date()
    if start is None:
        start = end - timedelta(days=DEFAULT_DAYS - 1)
    if end < start:
        raise ApiError(400, "invalid_request", "end (by default today, UTC) is before start")
    if (end - start).days + 1 > MAX_DAYS:
        raise ApiError(400, "invalid_request", f"start..end spans more than {MAX_DAYS} days")
    return start, end


async def tenant_to_read(identity: Identity, policy: PolicyEngine, tenant: str | None) -> str:
    """Whose usage the caller reads: its own tenant's, or for a platform admin the
    one it names (it belongs to none, so it must name one)."""
    if tenant is None:
        if identity.tenant == ANY_TENANT:
            raise ApiError(400, "invalid_request", "tenant: name the tenant whose usage to read")
        tenant = identity.tenant
    elif tenant != identity.tenant and not identity.is_admin:
        # Checked here as well as by the policy: a tenant never reads another's usage.
        raise ApiError(403, "forbidden", "only platform admins may read another tenant's usage")
    await authorize(policy, identity, "usage.read", tenant)
    return tenant


class UsageController(Controller):
    path = "/api/v1/usage"
    tags = ["usage"]

    @get(
        "/",
        operation_id="GetUsage",
        summary="Inference usage per UTC day and model: requests, errors and tokens.",
    )
    async def usage(
        self,
        request: Request[Identity, Any, Any],
        database: NamedDependency[Database],
        policy: NamedDependency[PolicyEngine],
        start: Day = None,
        end: Day = None,
        model: ModelName = None,
        tenant: TenantName = None,
    ) -> UsageOut:
        first, last = period(start, end)
        owner = await tenant_to_read(request.user, policy, tenant)
        async with database.session() as session:
            rows = await usage_summary(session, owner, start=first, end=last, model=model)
        return UsageOut.of(owner, first, last, rows)
