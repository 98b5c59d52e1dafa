"""The console's workloads: the listing, one workload's page and its cancellation.

A platform admin reads every tenant's (``/api/v1/admin/workloads``, one of them at
``/api/v1/admin/workloads/{id}``, cancelled with ``DELETE`` there); a tenant admin its
own tenant's through the tenant API (``/api/v1/workloads``), so another tenant's
workload is as absent to it as one that does not exist (404)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from litestar import Request, Response, get, post

from gateway.console.base import ConsolePages, page, redirect
from gateway.console.html import (
    definition,
    esc,
    field,
    filters,
    form,
    message,
    pager,
    select,
    table,
)
from gateway.console.pages import (
    STATES,
    Cursor,
    NameFilter,
    State,
    WorkloadId,
    _detail,
    _items,
    _queue_link,
    _requests,
    _when,
)
from gateway.console.sessions import Session

__all__ = ["WorkloadPages"]

HERE = "/console/workloads"
LIVE = ("pending", "admitted", "running")


def _api_path(session: Session, workload_id: str = "") -> str:
    """Where the session reads (and cancels) workloads: every tenant's for a platform
    admin, its own tenant's for a tenant admin."""
    base = "/api/v1/admin/workloads" if session.platform_admin else "/api/v1/workloads"
    return f"{base}/{workload_id}" if workload_id else base


def _link(w: dict[str, Any]) -> str:
    return f'<a href="{HERE}/{esc(w.get("id"))}">{esc(w.get("name"))}</a>'


def _blocking(reason: dict[str, Any]) -> str:
    """Why a pending workload waits, level by level: what it asks of which queue or
    cohort, flavor and resource, and what is free there."""
    rows = [
        (
            esc(b.get("level")),
            esc(b.get("name")),
            esc(b.get("flavor") or ""),
            esc(b.get("resource")),
            esc(b.get("requested")),
            esc(b.get("available")),
            esc(b.get("code")),
        )
        for b in reason.get("blocking") or []
        if isinstance(b, dict)
    ]
    if not rows:
        return ""
    headers = ["level", "name", "flavor", "resource", "requested", "available", "why"]
    return "<h2>Why it waits</h2>" + table(headers, rows, test_id="blocking")


class WorkloadPages(ConsolePages):
    @get("/workloads")
    async def workloads(
        self,
        request: Request[Any, Any, Any],
        state_filter: State = None,
        cursor: Cursor = None,
        tenant: NameFilter = None,
        queue: NameFilter = None,
    ) -> Response[Any]:
        """A tenant admin: its tenant's workloads; a platform admin: every tenant's,
        filtered by tenant and queue too. A page at a time, by the API's cursor."""
        session = await self.signed_in(request)
        admin = session.platform_admin
        state = state_filter if state_filter in STATES else None
        kept = {
            k: v
            for k, v in (
                ("state", state),
                *((("tenant", tenant), ("queue", queue)) if admin else ()),
            )
            if v
        }
        params = {"limit": "50", **kept, **({"cursor": cursor} if cursor else {})}
        answer = await self.api(request, session).get(_api_path(session), **params)
        if not answer.ok:
            return await self.failed(request, session, answer, HERE)
        if admin:
            picker = filters(
                HERE,
                field("tenant", "tenant", tenant or "", maxlength=63, size=12, placeholder="any")
                + field("queue", "queue", queue or "", maxlength=63, size=12, placeholder="any")
                + select("state", "state", ("", *STATES), state or ""),
            )
        else:
            links = " ".join(
                f'<a href="{HERE}?state={s}"{" class=current" if s == state else ""}>{s}</a>'
                for s in STATES
            )
            picker = f'<p class="filters">state: <a href="{HERE}">all</a> {links}</p>'
        rows = [
            (
                _link(w),
                *([esc(w.get("tenant"))] if admin else []),
                f'<span class="state {esc(w.get("state"))}">{esc(w.get("state"))}</span>',
                _queue_link(w.get("queue")) if admin else esc(w.get("queue")),
                esc(w.get("priority")),
                esc(_requests(w.get("pod_sets") or [])),
                esc((w.get("reason") or {}).get("code", "")),
                _when(w.get("created_at")),
            )
            for w in _items(answer.body)
        ]
        headers = ["name", *(["tenant"] if admin else []), "state", "queue"]
        body = (
            picker
            + table(
                [*headers, "priority", "requests", "reason", "created"], rows, test_id="workloads"
            )
            + pager(HERE, kept, answer.body.get("next_cursor"))
        )
        return page(session, "Workloads", body, HERE)

    @get("/workloads/{workload_id:str}")
    async def workload(
        self, request: Request[Any, Any, Any], workload_id: WorkloadId
    ) -> Response[Any]:
        session = await self.signed_in(request)
        answer = await self.api(request, session).get(_api_path(session, workload_id))
        if not answer.ok:
            return await self.failed(request, session, answer, HERE)
        w = answer.body
        reason = w.get("reason") or {}
        queue = _queue_link(w["queue"]) if session.platform_admin else esc(w["queue"])
        tenant = (
            f'<a href="/console/tenants/{quote(str(w.get("tenant")))}">{esc(w.get("tenant"))}</a>'
            if session.platform_admin
            else esc(w.get("tenant"))
        )
        facts = definition(
            [
                ("id", f"<code>{esc(w['id'])}</code>"),
                ("tenant", f'<span data-testid="tenant">{tenant}</span>'),
                (
                    "state",
                    f'<span class="state {esc(w["state"])}" data-testid="state">'
                    f"{esc(w['state'])}</span>",
                ),
                ("queue", queue),
                ("priority", esc(w["priority"])),
                ("requests", esc(_requests(w.get("pod_sets", [])))),
                (
                    "reason",
                    f'<span data-testid="reason">{esc(reason.get("code", ""))}'
                    f" {esc(reason.get('message', ''))}</span>",
                ),
                ("expected start", _when(w.get("estimated_start"))),
                ("backend", esc(w.get("backend") or "")),
                ("attempt", esc(w.get("attempt"))),
                ("created", _when(w.get("created_at"))),
                ("admitted", _when(w.get("admitted_at"))),
                ("finished", _when(w.get("finished_at"))),
            ]
        )
        events = table(
            ["at", "event", "attempt", "detail"],
            [
                (
                    _when(e.get("at")),
                    esc(e.get("type")),
                    esc(e.get("attempt")),
                    f"<code>{esc(_detail(e.get('detail')))}</code>",
                )
                for e in w.get("events", [])
            ],
            test_id="events",
        )
        cancel = ""
        if w["state"] in LIVE and not w.get("cancel_requested"):
            cancel = form(
                f"{HERE}/{w['id']}/cancel",
                session.csrf,
                "",
                button="Cancel workload",
                danger=True,
            )
        shown = len(w.get("events", []))
        count = w.get("event_count", shown)
        more = (
            f'<p class="muted">The last {esc(shown)} of {esc(count)} events.</p>'
            if isinstance(count, int) and count > shown
            else ""
        )
        body = f"{facts}{cancel}{_blocking(reason)}<h2>Events</h2>{events}{more}"
        return page(session, f"Workload {w['name']}", body, HERE)

    @post("/workloads/{workload_id:str}/cancel")
    async def cancel(
        self, request: Request[Any, Any, Any], workload_id: WorkloadId
    ) -> Response[Any]:
        session = await self.signed_in(request)
        answer = await self.api(request, session).call("DELETE", _api_path(session, workload_id))
        if not answer.ok:
            return await self.failed(request, session, answer, HERE)
        await self.flash(request, session, message("ok", "Cancel requested."))
        return redirect(f"{HERE}/{workload_id}")
