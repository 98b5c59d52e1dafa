"""What the console's quota-object pages share (flavors, cohorts, new cluster queues):
every object of a kind read page after page, a platform admin's guard, and the grid
of quotas a cohort or a new queue is given in.

A grid row is one (resource group, flavor, resource) with its nominal quota and its
optional borrowing and lending limits; rows with the same group number make one
resource group, whose resources are those its rows name. The API checks the rest (a
flavor of a group must cover each of its resources, limits against each other) and
names the field at fault."""

from __future__ import annotations

import re
from typing import Any

from litestar import Request, Response

from gateway.console.api import Answer, ConsoleApi
from gateway.console.base import ConsolePages, FormError, page, redirect
from gateway.console.html import esc, message
from gateway.console.pages import _items, _number
from gateway.console.sessions import Session

__all__ = [
    "LIMITS",
    "PlatformPages",
    "every_object",
    "grid",
    "groups_from_form",
    "rows_of_groups",
    "summary",
    "version_of",
]

LIMITS = ("nominal", "borrowing_limit", "lending_limit")
QUANTITY = re.compile(r"^[0-9]{1,15}(\.[0-9]{1,9})?([A-Za-z]{1,3})?$")
QUANTITY_PATTERN = r"[0-9]{1,15}(\.[0-9]{1,9})?([A-Za-z]{1,3})?"
RESOURCE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,251}[A-Za-z0-9])?$")
MAX_ROWS = 64
SPARE_ROWS = 4  # empty rows under the filled ones: room for a new flavor or resource
OBJECT_PAGES = 20  # of 500 each: far more than any real deployment holds


async def every_object(api: ConsoleApi, kind: str) -> Answer:
    """Every object of a kind (``flavors``, ``cohorts``, ``cluster-queues``), page after
    page; a list cut at a page's end would hide what it does not show."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(OBJECT_PAGES):
        params = {"limit": "500", **({"cursor": cursor} if cursor else {})}
        answer = await api.get(f"/api/v1/admin/config/{kind}", **params)
        if not answer.ok:
            return answer
        items += _items(answer.body)
        cursor = answer.body.get("next_cursor")
        if not cursor:
            break
    return Answer(200, {"items": items, "next_cursor": None})


class PlatformPages(ConsolePages):
    """Pages only a platform admin has: a tenant admin who types their address is
    refused (403), with no navigation entry leading there."""

    async def platform(self, request: Request[Any, Any, Any]) -> Session | Response[Any]:
        session = await self.signed_in(request)
        if not session.platform_admin:
            body = (
                message("error", "Only a platform admin manages this.", test_id="api-error")
                + '<p><a href="/console/dashboard">Dashboard</a></p>'
            )
            return page(session, "Refused", body, "", 403)
        return session

    async def done(
        self, request: Request[Any, Any, Any], session: Session, said: str, to: str
    ) -> Response[Any]:
        """A change made: said once (HTML) on the page ``to``."""
        await self.flash(request, session, message("ok", said, test_id="saved"))
        return redirect(to)


def rows_of_groups(groups: Any) -> list[dict[str, str]]:
    """The grid's rows of a spec's ``resource_groups``."""
    rows: list[dict[str, str]] = []
    for g, group in enumerate(groups or [], start=1):
        if not isinstance(group, dict):
            continue
        for flavor in group.get("flavors") or []:
            if not isinstance(flavor, dict):
                continue
            for resource, quota in (flavor.get("quotas") or {}).items():
                shaped = quota if isinstance(quota, dict) else {"nominal": quota}
                rows.append(
                    {
                        "group": str(g),
                        "flavor": str(flavor.get("name", "")),
                        "resource": str(resource),
                        **{limit: _number(shaped.get(limit)) for limit in LIMITS},
                    }
                )
    return rows


def _typed_rows(data: Any) -> list[dict[str, str]]:
    count = _count(data)
    rows = []
    for i in range(count):
        row = {}
        for name in ("group", "flavor", "resource", *LIMITS):
            raw = data.get(f"{name}-{i}")
            row[name] = raw.strip() if isinstance(raw, str) else ""
        rows.append(row)
    return rows


def _count(data: Any) -> int:
    raw = data.get("rows") if data is not None else None
    if isinstance(raw, str) and raw.isdigit():
        return min(int(raw), MAX_ROWS)
    return 0


def grid(flavors: list[str], *, spec_groups: Any = None, data: Any = None) -> str:
    """The quota grid: the rows typed (``data``, a refused form shown again) or the
    spec's, then a few empty ones."""
    rows = _typed_rows(data) if data is not None else rows_of_groups(spec_groups)
    filled = [r for r in rows if any(r.get(k) for k in ("flavor", "resource", "nominal"))]
    blank = {"group": "", "flavor": "", "resource": "", **dict.fromkeys(LIMITS, "")}
    rows = (filled + [dict(blank) for _ in range(SPARE_ROWS)])[:MAX_ROWS]
    cells = []
    for i, row in enumerate(rows):
        options = "".join(
            f'<option value="{esc(f)}"{" selected" if f == row["flavor"] else ""}>'
            f"{esc(f or '(none)')}</option>"
            for f in ["", *flavors, *([row["flavor"]] if row["flavor"] not in flavors else [])]
        )
        inputs = [
            f'<input name="group-{i}" value="{esc(row["group"] or "1")}" size="2" maxlength="2"'
            f' pattern="[0-9]{{1,2}}" aria-label="row {i + 1} resource group"'
            f' data-testid="group-{i}">',
            f'<select name="flavor-{i}" aria-label="row {i + 1} flavor"'
            f' data-testid="flavor-{i}">{options}</select>',
            f'<input name="resource-{i}" value="{esc(row["resource"])}" size="18"'
            f' maxlength="253" placeholder="nvidia.com/gpu" aria-label="row {i + 1} resource"'
            f' data-testid="resource-{i}">',
        ]
        for limit in LIMITS:
            inputs.append(
                f'<input name="{limit}-{i}" value="{esc(row[limit])}" size="8" maxlength="30"'
                f' pattern="{QUANTITY_PATTERN}" aria-label="row {i + 1} {limit.replace("_", " ")}"'
                f' data-testid="{limit}-{i}"'
                + (' placeholder="none"' if limit != "nominal" else "")
                + ">"
            )
        cells.append("<tr>" + "".join(f"<td>{c}</td>" for c in inputs) + "</tr>")
    head = "".join(
        f"<th>{esc(h)}</th>"
        for h in ("group", "flavor", "resource", "nominal", "borrowing limit", "lending limit")
    )
    return (
        f'<input type="hidden" name="rows" value="{len(rows)}">'
        f'<table data-testid="quota-grid"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(cells)}</tbody></table>"
        '<p class="muted">One row per flavor and resource; rows with the same group number'
        " make one resource group (each of its flavors needs a row for each of its"
        " resources). Quantities as 4, 1.5, 500m or 64Gi; empty limits mean none; empty"
        " rows are ignored.</p>"
    )


def groups_from_form(data: Any) -> list[dict[str, Any]]:
    """The ``resource_groups`` of a submitted grid; :class:`FormError` names the row at
    fault. Groups keep their numbers' order, flavors and resources the rows' order."""
    groups: dict[int, dict[str, Any]] = {}
    for i, row in enumerate(_typed_rows(data), start=1):
        if not any(row[k] for k in ("flavor", "resource", "nominal", *LIMITS)):
            continue
        if not row["flavor"] or not row["resource"] or not row["nominal"]:
            raise FormError(f"quota row {i}: give a flavor, a resource and a nominal quota")
        if not RESOURCE.match(row["resource"]):
            raise FormError(f"quota row {i}: {row['resource'][:60]!r} is not a resource name")
        number = row["group"] or "1"
        if not number.isdigit() or len(number) > 2:
            raise FormError(f"quota row {i}: the group is a number, 1 to 99")
        quota: dict[str, Any] = {}
        for limit in LIMITS:
            text = row[limit]
            if not text:
                continue
            if not QUANTITY.match(text):
                raise FormError(
                    f"quota row {i} {limit.replace('_', ' ')}: {text[:40]!r} is not a quantity"
                    " (as 4, 1.5, 500m or 64Gi)"
                )
            quota[limit] = int(text) if text.isdigit() else text
        group = groups.setdefault(int(number), {"resources": [], "flavors": {}})
        if row["resource"] not in group["resources"]:
            group["resources"].append(row["resource"])
        quotas = group["flavors"].setdefault(row["flavor"], {})
        if row["resource"] in quotas:
            raise FormError(
                f"quota row {i}: {row['flavor']} {row['resource']} is given twice in group {number}"
            )
        quotas[row["resource"]] = quota
    return [
        {
            "resources": group["resources"],
            "flavors": [{"name": f, "quotas": q} for f, q in group["flavors"].items()],
        }
        for _, group in sorted(groups.items())
    ]


def summary(groups: Any) -> str:
    """A spec's quotas in one cell: ``flavor resource nominal (borrow ≤ b, lend ≤ l)``."""
    lines = []
    for row in rows_of_groups(groups):
        extra = ", ".join(
            f"{label} {row[limit]}"
            for label, limit in (("borrow ≤", "borrowing_limit"), ("lend ≤", "lending_limit"))
            if row[limit]
        )
        lines.append(
            esc(f"{row['flavor']} {row['resource']}: {row['nominal']}")
            + (f' <span class="muted">({esc(extra)})</span>' if extra else "")
        )
    return "<br>".join(lines) or '<span class="muted">none</span>'


def version_of(data: Any) -> str:
    """The version a form was read at; :class:`FormError` when it lost it."""
    raw = data.get("version")
    if not isinstance(raw, str) or not raw.isdigit() or len(raw) > 18:
        raise FormError("This form lost its version: reload the page.")
    return raw
