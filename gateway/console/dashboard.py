"""The platform admin's dashboard, at any size: the platform's totals from
``GET /api/v1/admin/summary`` (a dozen numbers, whatever the number of queues), and the
queues one page at a time from ``GET /api/v1/admin/queues`` (its cursor), never the whole
config or a thousand rows."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from gateway.console.api import Answer, ConsoleApi
from gateway.console.html import definition, esc, message, pager, table, usage_bar

__all__ = ["PAGE", "every_page", "live_source", "platform_dashboard", "queue_page"]

PAGE = 50
"""Queues per page of the dashboard's tables."""
LIST_PAGE = 500
"""Items per call when a page needs a whole list (the API's largest page)."""
MAX_PAGES = 200
"""At most this many calls for one list (100,000 items at 500 a page)."""


def queue_page(cursor: str | None) -> dict[str, str]:
    """The query of the dashboard's page of queues after ``cursor``."""
    return {"limit": str(PAGE), **({"cursor": cursor} if cursor else {})}


def live_source(cursor: str | None) -> str:
    """Where the page's script fetches the live table again: the same page of queues."""
    query = urlencode({"cursor": cursor}) if cursor else ""
    return "/console/dashboard/live" + (f"?{query}" if query else "")


def platform_dashboard(
    summary: Answer, live: Answer, live_html: str, cursor: str | None, link: Any
) -> str:
    """The totals, the busiest queues, and this page of queues (its live state and its
    quota); ``live_html`` is the live table as rendered for this page, ``link`` renders
    a queue's name as a link to its page."""
    body = summary.body if isinstance(summary.body, dict) else {}
    cards = definition(
        [
            ("tenants", f'<span data-testid="tenant-count">{esc(body.get("tenants", ""))}</span>'),
            ("cluster queues", f'<span data-testid="queue-count">{esc(body.get("queues"))}</span>'),
            ("cohorts", esc(body.get("cohorts", ""))),
            ("flavors", esc(body.get("flavors", ""))),
            ("admitted", f'<span data-testid="admitted-count">{esc(body.get("admitted"))}</span>'),
            ("pending", f'<span data-testid="pending-count">{esc(body.get("pending"))}</span>'),
            (
                "tokens, last minute",
                f'<span data-testid="tokens-per-minute">{esc(body.get("tokens_last_minute"))}'
                "</span>",
            ),
        ]
    )
    top_tenants = table(
        ["tenant", "tokens, last minute"],
        [
            (esc(t.get("tenant", "")), esc(t.get("tokens", "")))
            for t in _dicts(body.get("top_tenants_last_minute"))
        ],
        test_id="top-tenants",
    )
    totals = table(
        ["flavor", "resource", "usage / capacity", "borrowed", "queues"],
        [
            (
                esc(r.get("flavor", "")),
                esc(r.get("resource", "")),
                usage_bar(r.get("usage"), r.get("capacity"), r.get("borrowed")),
                esc(_number(r.get("borrowed"))),
                esc(r.get("queues", "")),
            )
            for r in _dicts(body.get("resources"))
        ],
        test_id="totals",
    )
    busiest = table(
        ["queue", "cohort", "pending", "admitted"],
        [
            (
                link(q.get("name")),
                esc(q.get("cohort") or ""),
                esc(q.get("pending")),
                esc(q.get("admitted")),
            )
            for q in _dicts(body.get("most_pending"))
        ],
        test_id="most-pending",
    )
    page = live.body if live.ok and isinstance(live.body, dict) else {}
    quota_rows = []
    for queue in _dicts(page.get("items")):
        for level in _dicts(queue.get("resources")):
            quota_rows.append(
                (
                    link(queue.get("name")),
                    esc(queue.get("cohort") or ""),
                    esc(level.get("flavor", "")),
                    esc(level.get("resource", "")),
                    esc(_number(level.get("nominal"))),
                    esc(_number(level.get("borrowing_limit"))),
                    esc(_number(level.get("lending_limit"))),
                )
            )
    quota = table(
        ["queue", "cohort", "flavor", "resource", "nominal", "borrowing limit", "lending limit"],
        quota_rows,
        test_id="quotas",
    )
    shown = f"queues after {esc(cursor)}" if cursor else "the first queues"
    more = pager("/console/dashboard", {}, page.get("next_cursor"), label=f"next {PAGE} queues")
    first = '<p class="pager"><a href="/console/dashboard">first queues</a></p>' if cursor else ""
    problem = "" if summary.ok else message("error", esc(summary.error))
    return (
        f'{problem}<section class="cards">{cards}</section>'
        f"<h2>Every queue, per flavor and resource</h2>{totals}"
        f"<h2>Most waiting</h2>{busiest}"
        f"<h2>Busiest tenants, last minute</h2>{top_tenants}"
        f'<h2>Live usage <span class="muted">({shown}, {PAGE} a page)</span></h2>'
        f'<div id="live" data-source="{esc(live_source(cursor))}">{live_html}</div>'
        f"<h2>Quota per queue, flavor and resource</h2>{quota}{first}{more}"
    )


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _number(value: Any) -> str:
    """A quantity as the API gives it, without a float's trailing ``.0``."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None else str(value)


async def every_page(api: ConsoleApi, path: str) -> Answer:
    """Every item of a cursor-paged list (``items``, ``next_cursor``), page after page,
    as one answer with no ``next_cursor``; the first refusal as it came. A cursor that
    does not move ends the walk rather than looping."""
    items: list[Any] = []
    cursor: str | None = None
    first: Answer | None = None
    for _ in range(MAX_PAGES):
        params = {"limit": str(LIST_PAGE), **({"cursor": cursor} if cursor else {})}
        answer = await api.get(path, **params)
        if not answer.ok or not isinstance(answer.body, dict):
            return answer
        first = first or answer
        items.extend(answer.body.get("items") or [])
        following = answer.body.get("next_cursor")
        if not isinstance(following, str) or not following or following == cursor:
            break
        cursor = following
    assert first is not None
    return Answer(first.status, {**first.body, "items": items, "next_cursor": None}, first.etag)
