"""A chargeback report as text: CSV, JSON (the usage API's answer) or an aligned table,
one line per period, group and resource. ``ignara report`` prints these."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from datetime import date
from decimal import Decimal

import msgspec

from gateway.usage.schemas import ChargesOut, decimal_text, money_text
from tenants.services.charges import ChargeReport, ReportRow

__all__ = ["FORMATS", "render"]

FORMATS = ("table", "csv", "json")


def render(
    fmt: str,
    report: ChargeReport,
    *,
    tenant: str | None,
    start: date,
    end: date,
    per: str,
    group_by: Sequence[str],
    currency: str | None,
) -> str:
    if fmt == "json":
        out = ChargesOut.of(tenant, start, end, per, group_by, currency, report)
        return msgspec.json.format(msgspec.json.encode(out).decode(), indent=2) + "\n"
    header = ["period", *group_by, "resource", "amount", "money", "currency", "unpriced"]
    lines = [_line(row, str(row.period), group_by, currency) for row in report.rows]
    totals = _line(report.totals, "total", group_by, currency)
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(line for group in lines for line in group)
        return buffer.getvalue()
    return _table(header, [line for group in lines for line in group], totals)


def _line(
    row: ReportRow, period: str, group_by: Sequence[str], currency: str | None
) -> list[list[str]]:
    """One line per resource of ``row``: its amount, what the priced part cost, and
    whether some of it had no price."""
    keys = ["" if period == "total" else (row.group.get(k) or "-") for k in group_by]
    return [
        [
            period,
            *keys,
            resource,
            decimal_text(amount),
            _money(row.monies.get(resource), currency),
            currency or "",
            "yes" if resource in row.unpriced else "",
        ]
        for resource, amount in sorted(row.amounts.items())
    ]


def _money(value: Decimal | None, currency: str | None) -> str:
    if currency is None or value is None:
        return ""
    return money_text(value)


def _table(header: list[str], lines: list[list[str]], totals: list[list[str]]) -> str:
    every = [header, *lines, *totals]
    widths = [max(len(line[i]) for line in every) for i in range(len(header))]
    numeric = {header.index("amount"), header.index("money")}

    def text(line: list[str]) -> str:
        cells = [
            cell.rjust(width) if i in numeric else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * width for width in widths)
    body = [text(header), rule, *(text(line) for line in lines)]
    if totals:
        body += [rule, *(text(line) for line in totals)]
    return "\n".join(body) + "\n"
