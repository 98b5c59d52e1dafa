"""The chargeback ledger: every GPU-hour and every token charged, in one table.

Two writers, each in the transaction of the change it accounts for:

- a training run that ends (finished, failed, cancelled while running, preempted,
  lost) is charged what it used: for each metered resource of its admission (always
  ``nvidia.com/gpu``, and any resource ``r`` whose queue has a ``r-hours`` budget
  resource), pods x per-pod request x the hours from the backend-reported start to the
  run's end, cut at UTC midnights, one row per flavor, resource (``r-hours``) and day.
  :func:`charge_ended_run` is called by the one update every workload change goes
  through (:func:`tenants.services.workloads.update_if_unchanged`);
- an inference call's tokens, when its usage record is written (:func:`call_charges`,
  used by :func:`tenants.services.usage.insert_usage`): ``input-tokens`` (the prompt)
  and ``output-tokens`` (the completion), separately so that they can be priced apart.

A charge written twice lands once: per run, flavor, resource and day; per call (its
ledger reservation) and resource (partial unique indexes; inserts skip conflicts).
Amounts are exact decimals (6 places, rounded half up once, per row).

Readers: :func:`charged_hours` (what the admission loop counts as charged in a budget
period) and :func:`charge_report` (the usage API and ``ignara report``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from enum import StrEnum
from fractions import Fraction
from typing import Any

from sqlalchemy import BigInteger, cast, func
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.sql.elements import ColumnElement
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession
from sqlmodel.sql.expression import Select

from quota.periods import BudgetPeriod, day_slices, period_start
from quota.resources import MILLI, QuantityError, parse_quantity
from tenants.models import ChargeRow, ClusterQueueRow, CohortRow, WorkloadRow
from tenants.models.charge import AMOUNT_SCALE, HOURS_SUFFIX, INPUT_TOKENS, OUTPUT_TOKENS

__all__ = [
    "GPU",
    "GROUP_KEYS",
    "HOURS_SUFFIX",
    "INPUT_TOKENS",
    "OUTPUT_TOKENS",
    "TOKEN_RESOURCES",
    "ChargeReport",
    "Prices",
    "ReportRow",
    "ReportTooLargeError",
    "call_charges",
    "charge_ended_run",
    "charge_report",
    "charged_hours",
    "cohort_paths",
    "count_charges",
    "ends_run",
    "insert_charges",
    "round_amount",
    "run_charges",
]

GPU = "nvidia.com/gpu"
TOKEN_RESOURCES = (INPUT_TOKENS, OUTPUT_TOKENS)
TOKENS_PER_PRICE = 1_000_000  # token prices are per million tokens
_ENDED = ("succeeded", "failed", "cancelled")
_QUANTUM = Decimal(1).scaleb(-AMOUNT_SCALE)
_MICROS = 10**AMOUNT_SCALE


def round_amount(value: Fraction | Decimal | int) -> Decimal:
    """``value`` rounded half up to the ledger's 6 decimals, exactly."""
    exact = Fraction(value)
    numerator, denominator = exact.numerator * _MICROS, exact.denominator
    micros, rest = divmod(abs(numerator), denominator)
    if 2 * rest >= denominator:
        micros += 1
    return Decimal(micros if numerator >= 0 else -micros).scaleb(-AMOUNT_SCALE)


# --- where a charge goes ------------------------------------------------------------------


async def cohort_paths(session: AsyncSession, queues: Iterable[str]) -> dict[str, str]:
    """Each queue's cohorts, root first, joined with "/" ("" for a queue in no cohort,
    or one no longer configured)."""
    wanted = set(queues)
    if not wanted:
        return {}
    rows = (
        await session.exec(
            select(ClusterQueueRow.name, ClusterQueueRow.spec).where(
                col(ClusterQueueRow.name).in_(wanted)
            )
        )
    ).all()
    parents = {
        name: spec.get("parent")
        for name, spec in (await session.exec(select(CohortRow.name, CohortRow.spec))).all()
    }
    paths = dict.fromkeys(wanted, "")
    for name, spec in rows:
        chain: list[str] = []
        cohort = spec.get("cohort")
        while isinstance(cohort, str) and cohort not in chain:  # a cycle is never stored
            chain.append(cohort)
            cohort = parents.get(cohort)
        paths[name] = "/".join(reversed(chain))[:1024]
    return paths


def _metered(queue_spec: Mapping[str, Any]) -> set[str]:
    """The resources whose use is charged in hours: GPUs always, and each resource the
    queue has a ``<resource>-hours`` budget for."""
    covered = {r for group in queue_spec.get("resource_groups", []) for r in group["resources"]}
    return {GPU} | {
        r[: -len(HOURS_SUFFIX)]
        for r in covered
        if r.endswith(HOURS_SUFFIX) and r[: -len(HOURS_SUFFIX)] in covered
    }


# --- GPU-hours of training runs -----------------------------------------------------------


def ends_run(row: WorkloadRow, values: Mapping[str, Any]) -> bool:
    """Whether writing ``values`` to ``row`` ends a run that holds quota with a backend
    job: it becomes final, or loses its admission or its job (preempted, lost). A
    preempted run ends when the admission loop releases its quota, not a few seconds
    later when its job is seen stopped: by then it no longer holds an admission."""
    if row.admission is None or row.job_id is None or row.state in _ENDED:
        return False
    if values.get("state", row.state) in _ENDED:
        return True
    return ("admission" in values and values["admission"] is None) or (
        "job_id" in values and values["job_id"] is None
    )


def run_charges(
    spec: Mapping[str, Any],
    admission: Mapping[str, Any],
    metered: set[str],
    started_at: datetime,
    ended_at: datetime,
) -> dict[tuple[str, str, date], Decimal]:
    """(flavor, charge resource, day) -> amount of one run: for each metered resource,
    its total request on each flavor (pods as admitted x per-pod request) x the hours
    of ``[started_at, ended_at)`` on that UTC day. Nothing if it never started or the
    interval is empty. Raises :class:`~quota.resources.QuantityError` for a bad spec."""
    counts = {p["name"]: (p["count"], p.get("flavors", {})) for p in admission["pod_sets"]}
    totals: dict[tuple[str, str], int] = {}  # (flavor, resource) -> milli-units
    for pod_set in spec["pod_sets"]:
        if pod_set["name"] not in counts:
            continue
        count, flavors = counts[pod_set["name"]]
        for resource, quantity in pod_set["requests"].items():
            flavor = flavors.get(resource)
            if resource not in metered or flavor is None:
                continue
            milli = count * parse_quantity(quantity)
            if milli:
                key = (flavor, resource + HOURS_SUFFIX)
                totals[key] = totals.get(key, 0) + milli
    charges: dict[tuple[str, str, date], Decimal] = {}
    for day, hours in day_slices(started_at, ended_at):
        for (flavor, resource), milli in totals.items():
            amount = round_amount(Fraction(milli, MILLI) * hours)
            if amount:
                charges[(flavor, resource, day)] = amount
    return charges


async def charge_ended_run(
    session: AsyncSession, row: WorkloadRow, values: Mapping[str, Any], now: datetime
) -> int:
    """Charge the run that writing ``values`` to ``row`` ends (see :func:`ends_run`),
    in ``session``'s transaction; returns the rows written. The run's end is its
    ``finished_at`` if the change sets one, else ``now``; its start the backend's."""
    if not ends_run(row, values):
        return 0
    started = values.get("started_at") or row.started_at
    if started is None:
        return 0  # it never started: nothing used
    ended = values.get("finished_at") or now
    queue = await session.get(ClusterQueueRow, row.queue)
    metered = _metered(queue.spec) if queue is not None else {GPU}
    assert row.admission is not None
    try:
        amounts = run_charges(row.spec, row.admission, metered, started, ended)
    except (QuantityError, KeyError, TypeError):
        return 0  # a spec the API accepted always parses; an older shape charges nothing
    path = (await cohort_paths(session, [row.queue]))[row.queue]
    charges = [
        {
            "tenant": row.tenant,
            "queue": row.queue,
            "cohort_path": path,
            "flavor": flavor,
            "resource": resource,
            "amount": amount,
            "model": None,
            "workload_id": row.id,
            "attempt": row.attempt,
            "call_id": None,
            "day": day,
            "at": now,
        }
        for (flavor, resource, day), amount in sorted(amounts.items())
    ]
    await insert_charges(session, charges)
    return len(charges)


# --- tokens of inference calls ------------------------------------------------------------


def call_charges(
    usage_rows: Sequence[Mapping[str, Any]], paths: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The token charges of usage rows (as :mod:`tenants.services.usage` writes them):
    ``input-tokens`` for the prompt, ``output-tokens`` for the completion, none for a
    count of zero. Charged on the call's UTC day, at when it was recorded."""
    charges: list[dict[str, Any]] = []
    for usage in usage_rows:
        for resource, tokens in (
            (INPUT_TOKENS, usage["prompt_tokens"]),
            (OUTPUT_TOKENS, usage["completion_tokens"]),
        ):
            if tokens > 0:
                charges.append(
                    {
                        "tenant": usage["tenant"],
                        "queue": usage["queue"],
                        "cohort_path": paths.get(usage["queue"], ""),
                        "flavor": usage["flavor"],
                        "resource": resource,
                        "amount": Decimal(tokens),
                        "model": usage["model"],
                        "workload_id": None,
                        "attempt": None,
                        "call_id": usage["reservation"],
                        "day": usage["day"],
                        "at": usage["created_at"],
                    }
                )
    return charges


# --- writing ------------------------------------------------------------------------------

_TABLE = ChargeRow.__table__  # type: ignore[attr-defined]
# No conflict target: either unique index (per run, per call) makes a repeat a no-op.
_INSERTS = {
    "postgresql": postgresql_insert(_TABLE).on_conflict_do_nothing(),
    "sqlite": sqlite_insert(_TABLE).on_conflict_do_nothing(),
}


async def insert_charges(session: AsyncSession, charges: Sequence[Mapping[str, Any]]) -> None:
    """Add ``charges`` (each with every column) in one executemany, skipping any that
    is charged already; the caller's session owns the transaction."""
    if not charges:
        return
    connection = await session.connection()
    insert = _INSERTS.get(connection.dialect.name, _TABLE.insert())
    await connection.execute(insert, list(charges))


# --- reading ------------------------------------------------------------------------------


def _amount_sum(dialect: str) -> ColumnElement[Any]:
    """SUM(amount), exact on both databases: PostgreSQL's NUMERIC is; SQLite keeps a
    NUMERIC with decimals as a double, so there each amount is summed as integer
    millionths (exact for any amount below 10^9)."""
    if dialect == "sqlite":
        micros = func.round(col(ChargeRow.amount) * _MICROS)
        return func.sum(cast(micros, BigInteger))
    return func.sum(col(ChargeRow.amount))


def _as_amount(total: Any, dialect: str) -> Decimal:
    if total is None:
        return Decimal(0)
    if dialect == "sqlite":
        return Decimal(int(total)).scaleb(-AMOUNT_SCALE)
    return Decimal(total).quantize(_QUANTUM)


def _first_day_on_or_after(moment: datetime) -> date:
    moment = moment.astimezone(UTC)
    midnight = datetime.combine(moment.date(), time(), UTC)
    return moment.date() if moment == midnight else moment.date() + timedelta(days=1)


async def charged_hours(
    session: AsyncSession, start: datetime, end: datetime
) -> dict[tuple[str, str, str], Decimal]:
    """(queue, flavor, charge resource) -> what runs were charged of an ``-hours``
    resource on the days that begin in ``[start, end)`` (a budget period's bounds are
    midnights, so: the days of the period). Token charges are not included."""
    first, stop = _first_day_on_or_after(start), _first_day_on_or_after(end)
    connection = await session.connection()
    dialect = connection.dialect.name
    queue, flavor, resource = col(ChargeRow.queue), col(ChargeRow.flavor), col(ChargeRow.resource)
    query: Select[str, str, str, Any] = Select(queue, flavor, resource, _amount_sum(dialect))
    query = query.where(
        col(ChargeRow.day) >= first,
        col(ChargeRow.day) < stop,
        resource.like(f"%{HOURS_SUFFIX}"),
    ).group_by(queue, flavor, resource)
    rows = (await session.exec(query)).all()
    return {(q, f, r): _as_amount(total, dialect) for q, f, r, total in rows}


async def count_charges(
    session: AsyncSession, *, tenant: str | None, start: date, end: date
) -> int:
    """How many charges ``tenant`` (None: every tenant) has on ``start``..``end``."""
    query = select(func.count()).select_from(ChargeRow)
    query = query.where(col(ChargeRow.day) >= start, col(ChargeRow.day) <= end)
    if tenant is not None:
        query = query.where(col(ChargeRow.tenant) == tenant)
    return int((await session.exec(query)).one())


class GroupKey(StrEnum):
    TENANT = "tenant"
    QUEUE = "queue"
    FLAVOR = "flavor"
    MODEL = "model"
    RESOURCE = "resource"


GROUP_KEYS = tuple(k.value for k in GroupKey)


@dataclass(frozen=True)
class Prices:
    """What one unit of each (flavor, resource) costs, in ``currency``; token
    resources are priced per million tokens. Unpriced pairs have no money value."""

    currency: str | None = None
    rates: Mapping[tuple[str, str], Decimal] = field(default_factory=dict)

    def money(self, flavor: str, resource: str, amount: Decimal) -> Decimal | None:
        rate = self.rates.get((flavor, resource))
        if rate is None:
            return None
        if resource.endswith("-tokens"):
            return amount * rate / TOKENS_PER_PRICE
        return amount * rate


@dataclass
class ReportRow:
    """One period and group: the amount of each resource, what the priced ones cost,
    and which resources had no price."""

    period: date
    group: dict[str, str | None]
    amounts: dict[str, Decimal] = field(default_factory=dict)
    monies: dict[str, Decimal] = field(default_factory=dict)  # of the priced resources
    unpriced: set[str] = field(default_factory=set)

    @property
    def money(self) -> Decimal:
        return sum(self.monies.values(), Decimal(0))

    def add(self, resource: str, amount: Decimal, money: Decimal | None) -> None:
        self.amounts[resource] = self.amounts.get(resource, Decimal(0)) + amount
        if money is None:
            self.unpriced.add(resource)
        else:
            self.monies[resource] = self.monies.get(resource, Decimal(0)) + money


@dataclass
class ChargeReport:
    rows: list[ReportRow]
    totals: ReportRow
    read: int  # aggregated rows read from the database


class ReportTooLargeError(ValueError):
    """The report would read or answer more rows than allowed."""


Progress = Callable[[int], None]


async def charge_report(
    session: AsyncSession,
    *,
    tenant: str | None,
    start: date,
    end: date,
    per: BudgetPeriod,
    group_by: Sequence[str],
    prices: Prices,
    model: str | None = None,
    max_read: int | None = None,
    max_rows: int | None = None,
    progress: Progress | None = None,
) -> ChargeReport:
    """Charges of ``tenant`` (None: every tenant) on the days ``start``..``end`` (both
    included), per ``per`` period (its first day names it) and group, oldest first.

    The database sums per day, group, flavor and resource (flavor and resource: to
    price each amount); periods and groups are folded here. With ``progress``, it is
    read one day at a time and ``progress(days)`` told after each. Raises
    :class:`ReportTooLargeError` past ``max_read`` rows read or ``max_rows`` answered.
    """
    keys = [GroupKey(k) for k in group_by]
    connection = await session.connection()
    dialect = connection.dialect.name
    columns: list[Any] = [col(ChargeRow.day), col(ChargeRow.flavor), col(ChargeRow.resource)]
    columns += [col(getattr(ChargeRow, k.value)) for k in keys if k.value not in _FINEST]
    rows: dict[tuple[Any, ...], ReportRow] = {}
    totals = ReportRow(start, {})
    read = 0
    chunks = _days(start, end) if progress is not None else [(start, end)]
    for first, last in chunks:
        query: Any = Select(*columns, _amount_sum(dialect)).where(
            col(ChargeRow.day) >= first, col(ChargeRow.day) <= last
        )
        if tenant is not None:
            query = query.where(col(ChargeRow.tenant) == tenant)
        if model is not None:
            query = query.where(col(ChargeRow.model) == model)
        query = query.group_by(*columns)
        if max_read is not None:
            query = query.limit(max_read - read + 1)
        for record in (await session.exec(query)).all():
            read += 1
            if max_read is not None and read > max_read:
                raise ReportTooLargeError(f"it would read more than {max_read} rows")
            day, flavor, resource, *rest, total = record
            values = {"flavor": flavor, "resource": resource}
            values.update(zip([k.value for k in keys if k.value not in _FINEST], rest, strict=True))
            period = _period_of(_as_date(day), per)
            group = {k.value: values[k.value] for k in keys}
            key = (period, *group.values())
            row = rows.get(key)
            if row is None:
                if max_rows is not None and len(rows) >= max_rows:
                    raise ReportTooLargeError(f"it would answer more than {max_rows} rows")
                row = rows[key] = ReportRow(period, group)
            amount = _as_amount(total, dialect)
            money = prices.money(flavor, resource, amount)
            row.add(resource, amount, money)
            totals.add(resource, amount, money)
        if progress is not None:
            progress((last - first).days + 1)
    ordered = sorted(
        rows.values(), key=lambda r: (r.period, *(_sortable(v) for v in r.group.values()))
    )
    return ChargeReport(ordered, totals, read)


_FINEST = ("flavor", "resource")  # always read: every amount is priced per flavor and resource


def _sortable(value: str | None) -> tuple[bool, str]:
    return (value is not None, value or "")


def _days(start: date, end: date) -> list[tuple[date, date]]:
    days = [start + timedelta(days=i) for i in range((end - start).days + 1)]
    return [(day, day) for day in days]


def _as_date(value: Any) -> date:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    return date.fromisoformat(str(value))


def _period_of(day: date, per: BudgetPeriod) -> date:
    return period_start(per, datetime.combine(day, time(), UTC)).date()
