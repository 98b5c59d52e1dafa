"""Wire types of the usage API."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from decimal import ROUND_HALF_UP, Decimal

import msgspec

from tenants.services.charges import ChargeReport, ReportRow
from tenants.services.usage import UsageDay

__all__ = [
    "ChargesOut",
    "ChargesRowOut",
    "ChargesTotalsOut",
    "UsageDayOut",
    "UsageOut",
    "UsageTotals",
    "decimal_text",
    "money_text",
]


class UsageTotals(msgspec.Struct):
    requests: int
    errors: int  # calls answered with an HTTP status >= 400
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class UsageDayOut(msgspec.Struct):
    day: date  # UTC
    model: str
    requests: int
    errors: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

    @classmethod
    def of(cls, row: UsageDay) -> UsageDayOut:
        return cls(
            day=row.day,
            model=row.model,
            requests=row.requests,
            errors=row.errors,
            prompt_tokens=row.prompt_tokens,
            completion_tokens=row.completion_tokens,
            total_tokens=row.total_tokens,
        )


class UsageOut(msgspec.Struct):
    tenant: str
    start: date
    end: date  # included
    days: list[UsageDayOut]
    totals: UsageTotals

    @classmethod
    def of(cls, tenant: str, start: date, end: date, rows: Sequence[UsageDay]) -> UsageOut:
        totals = UsageTotals(
            requests=sum(r.requests for r in rows),
            errors=sum(r.errors for r in rows),
            prompt_tokens=sum(r.prompt_tokens for r in rows),
            completion_tokens=sum(r.completion_tokens for r in rows),
            total_tokens=sum(r.total_tokens for r in rows),
        )
        return cls(tenant, start, end, [UsageDayOut.of(r) for r in rows], totals)


def decimal_text(value: Decimal) -> str:
    """An exact decimal as plain text, rounded half up to 6 places, trailing zeros
    dropped ("16", "2.5", "0.000278"), never in exponent form."""
    rounded = value.quantize(_MICRO, rounding=ROUND_HALF_UP)
    text = format(rounded, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


_MICRO = Decimal("0.000001")


def money_text(value: Decimal) -> str:
    """Money as plain text: half up to 6 places, at least 2 ("221.25", "30.00",
    "0.000123")."""
    text = decimal_text(value)
    whole, _, cents = text.partition(".")
    return f"{whole}.{cents.ljust(2, '0')}"


class ChargesRowOut(msgspec.Struct):
    period: date  # the period's first day (a week starts on Monday), UTC
    group: dict[str, str | None]  # the grouping keys asked for; model is null for GPU-hours
    amounts: dict[str, str]  # resource -> amount in its unit (decimal text)
    money: str | None  # what the priced amounts cost; null when no prices are configured
    unpriced: list[str]  # resources with an amount but no price

    @classmethod
    def of(cls, row: ReportRow, priced: bool) -> ChargesRowOut:
        return cls(
            period=row.period,
            group=dict(row.group),
            amounts={r: decimal_text(a) for r, a in sorted(row.amounts.items())},
            money=money_text(row.money) if priced else None,
            unpriced=sorted(row.unpriced) if priced else [],
        )


class ChargesTotalsOut(msgspec.Struct):
    amounts: dict[str, str]
    money: str | None
    unpriced: list[str]


class ChargesOut(msgspec.Struct):
    """The chargeback report: charges per period and group, in amounts and money."""

    tenant: str | None  # null: every tenant (platform admins)
    start: date
    end: date  # included
    per: str  # day | week | month
    group_by: list[str]
    currency: str | None  # of every money value; null when no prices are configured
    rows: list[ChargesRowOut]
    totals: ChargesTotalsOut

    @classmethod
    def of(
        cls,
        tenant: str | None,
        start: date,
        end: date,
        per: str,
        group_by: Sequence[str],
        currency: str | None,
        report: ChargeReport,
    ) -> ChargesOut:
        priced = currency is not None
        totals = ChargesRowOut.of(report.totals, priced)
        return cls(
            tenant=tenant,
            start=start,
            end=end,
            per=per,
            group_by=list(group_by),
            currency=currency,
            rows=[ChargesRowOut.of(row, priced) for row in report.rows],
            totals=ChargesTotalsOut(totals.amounts, totals.money, totals.unpriced),
        )
