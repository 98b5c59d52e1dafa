"""Wire types of the usage API."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

import msgspec

from tenants.services.usage import UsageDay

__all__ = ["UsageDayOut", "UsageOut", "UsageTotals"]


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
