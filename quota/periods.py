"""Budget periods: the UTC month, week (from Monday) or day that a GPU-hour budget
is granted for, and how an interval of use falls into periods and days.

Times are aware UTC datetimes; nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from fractions import Fraction

__all__ = [
    "BudgetPeriod",
    "day_slices",
    "hours_between",
    "period_end",
    "period_start",
    "periods_between",
    "seconds_between",
]


class BudgetPeriod(StrEnum):
    MONTH = "month"
    WEEK = "week"
    DAY = "day"


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def period_start(kind: BudgetPeriod, moment: datetime) -> datetime:
    """The start of the period holding ``moment`` (a moment on a boundary starts it)."""
    day = _utc(moment).replace(hour=0, minute=0, second=0, microsecond=0)
    if kind is BudgetPeriod.DAY:
        return day
    if kind is BudgetPeriod.WEEK:
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)


def period_end(kind: BudgetPeriod, moment: datetime) -> datetime:
    """The first moment after the period holding ``moment``."""
    start = period_start(kind, moment)
    if kind is BudgetPeriod.DAY:
        return start + timedelta(days=1)
    if kind is BudgetPeriod.WEEK:
        return start + timedelta(days=7)
    if start.month == 12:
        return start.replace(year=start.year + 1, month=1)
    return start.replace(month=start.month + 1)


def seconds_between(start: datetime, end: datetime) -> Fraction:
    """Exact seconds from ``start`` to ``end`` (microseconds included); 0 if ``end``
    is not after ``start``."""
    delta = _utc(end) - _utc(start)
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return Fraction(max(micros, 0), 1_000_000)


def hours_between(start: datetime, end: datetime) -> Fraction:
    return seconds_between(start, end) / 3600


def periods_between(
    kind: BudgetPeriod, start: datetime, end: datetime
) -> Iterator[tuple[datetime, datetime, datetime]]:
    """``[start, end)`` cut at period boundaries: (period start, piece start, piece end)."""
    cursor = _utc(start)
    end = _utc(end)
    while cursor < end:
        boundary = period_end(kind, cursor)
        piece_end = min(boundary, end)
        yield period_start(kind, cursor), cursor, piece_end
        cursor = piece_end


def day_slices(start: datetime, end: datetime) -> Iterator[tuple[date, Fraction]]:
    """``[start, end)`` cut at UTC midnights: (day, exact hours of use on it). Every
    period is a union of days, so a use recorded per day adds up in any period."""
    for day_start, piece_start, piece_end in periods_between(BudgetPeriod.DAY, start, end):
        yield day_start.date(), hours_between(piece_start, piece_end)
