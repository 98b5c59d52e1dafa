"""`/api/v1/usage`: the caller's tenant's inference usage per UTC day and model; and,
asked with ``per``, ``group_by`` or ``month``, its chargeback report (every GPU-hour and
token charged, per day, week or month and group, in amounts and money)."""

from __future__ import annotations

import re
from datetime import date, timedelta
from typing import Annotated, Any, Literal

from litestar import Controller, Request, get
from litestar.di import NamedDependency
from litestar.params import Parameter

from gateway.auth import Identity
from gateway.auth.identity import ANY_TENANT
from gateway.authorization import authorize
from gateway.errors import ApiError
from gateway.policy import PolicyEngine
from gateway.usage.schemas import ChargesOut, UsageOut
from quota.periods import BudgetPeriod
from tenants import Database
from tenants.model_checks import MODEL_NAME_PATTERN
from tenants.models._base import utcnow
from tenants.services.charges import GROUP_KEYS, ReportTooLargeError, charge_report
from tenants.services.config import load_prices
from tenants.services.usage import usage_summary

__all__ = [
    "DEFAULT_DAYS",
    "EARLIEST_DAY",
    "LATEST_DAY",
    "MAX_DAYS",
    "MAX_READ",
    "MAX_ROWS",
    "UsageController",
    "month_days",
    "parse_group_by",
]

DEFAULT_DAYS = 30  # today and the 29 days before it
MAX_DAYS = 366  # a leap year: bounds the rows one request reads
EARLIEST_DAY, LATEST_DAY = date(1970, 1, 1), date(2999, 12, 31)
# A chargeback report reads at most so many (day, group, flavor, resource) sums and
# answers at most so many rows: past either, a 400 says to narrow it.
MAX_READ = 100_000
MAX_ROWS = 5_000
ALL_TENANTS = "*"

TenantName = Annotated[
    str | None,
    Parameter(
        pattern=r"^(\*|[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)$",
        description="Whose usage: another tenant's for platform admins only (others see "
        "their own); `*`: every tenant's, in a chargeback report.",
    ),
]
Per = Annotated[
    Literal["day", "week", "month"] | None,
    Parameter(
        description="A chargeback report per UTC day, week (from Monday) or month "
        "(default: month when group_by or month is given)."
    ),
]
GroupBy = Annotated[
    str | None,
    Parameter(
        pattern=r"^[a-z]{1,10}(,[a-z]{1,10}){0,4}$",
        description=f"A chargeback report grouped by these, comma-separated: "
        f"{', '.join(GROUP_KEYS)} (default: none, one row per period).",
    ),
]
Month = Annotated[
    str | None,
    Parameter(
        pattern=r"^[0-9]{4}-[0-9]{2}$",
        description="A chargeback report of this UTC month (2026-11), instead of start and end.",
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


def month_days(month: str) -> tuple[date, date]:
    """The first and last day of a ``YYYY-MM`` month; raises :class:`ValueError` naming
    what is wrong."""
    match = re.fullmatch(r"([0-9]{4})-([0-9]{2})", month)
    if match is None or not 1 <= int(match[2]) <= 12:
        raise ValueError(f"month: {month[:20]!r} is not a month such as 2026-11")
    year, number = int(match[1]), int(match[2])
    if not EARLIEST_DAY.year <= year <= LATEST_DAY.year:
        raise ValueError(f"month: {month} is not from {EARLIEST_DAY:%Y-%m} to {LATEST_DAY:%Y-%m}")
    first = date(year, number, 1)
    following = (first + timedelta(days=31)).replace(day=1)
    return first, following - timedelta(days=1)


def parse_group_by(text: str | None) -> list[str]:
    """The grouping keys of a comma-separated list; raises :class:`ValueError` naming an
    unknown or repeated one."""
    if not text:
        return []
    keys = text.split(",")
    for key in keys:
        if key not in GROUP_KEYS:
            raise ValueError(f"group_by: {key[:20]!r} is not one of {', '.join(GROUP_KEYS)}")
    if len(set(keys)) != len(keys):
        raise ValueError("group_by: a key is named twice")
    return keys


class UsageController(Controller):
    path = "/api/v1/usage"
    tags = ["usage"]

    @get(
        "/",
        operation_id="GetUsage",
        summary="Inference usage per UTC day and model: requests, errors and tokens; with "
        "per, group_by or month, the chargeback report of GPU-hours and tokens.",
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
        per: Per = None,
        group_by: GroupBy = None,
        month: Month = None,
    ) -> UsageOut | ChargesOut:
        if per is not None or group_by is not None or month is not None:
            return await self._charges(
                request.user, database, policy, start, end, model, tenant, per, group_by, month
            )
        if tenant == ALL_TENANTS:
            raise ApiError(
                400, "invalid_request", "tenant: * is for a chargeback report (per, group_by)"
            )
        first, last = period(start, end)
        owner = await tenant_to_read(request.user, policy, tenant)
        async with database.session() as session:
            rows = await usage_summary(session, owner, start=first, end=last, model=model)
        return UsageOut.of(owner, first, last, rows)

    async def _charges(
        self,
        identity: Identity,
        database: Database,
        policy: PolicyEngine,
        start: date | None,
        end: date | None,
        model: str | None,
        tenant: str | None,
        per: str | None,
        group_by: str | None,
        month: str | None,
    ) -> ChargesOut:
        try:
            keys = parse_group_by(group_by)
            if month is not None and (start is not None or end is not None):
                raise ValueError("month: give either month or start and end")
            first, last = month_days(month) if month is not None else period(start, end)
        except ValueError as err:
            raise ApiError(400, "invalid_request", str(err)) from None
        owner = await tenant_to_read(identity, policy, tenant)
        every = owner == ALL_TENANTS
        async with database.session() as session:
            prices = await load_prices(session)
            try:
                report = await charge_report(
                    session,
                    tenant=None if every else owner,
                    start=first,
                    end=last,
                    per=BudgetPeriod(per or "month"),
                    group_by=keys,
                    prices=prices,
                    model=model,
                    max_read=MAX_READ,
                    max_rows=MAX_ROWS,
                )
            except ReportTooLargeError as err:
                raise ApiError(
                    400,
                    "report_too_large",
                    f"the report is too large: {err}; ask for fewer days, a longer period "
                    "or fewer group_by keys",
                ) from None
        return ChargesOut.of(
            None if every else owner, first, last, per or "month", keys, prices.currency, report
        )
