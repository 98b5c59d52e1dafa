"""The console's pages, server-rendered; each reads and changes only through the API.

Every change is a POST carrying the session's CSRF token (checked before any handler
runs, by :func:`check_csrf`); the answers redirect (Post/Redirect/Get), and a new key's
token travels to the next page once, in the session, never in a URL.
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.enums import MediaType
from litestar.params import HeaderParameter, Parameter, QueryParameter
from litestar.response import Redirect, Stream

from gateway.auth import ANY_TENANT, AuthenticationError, Identity, parse_api_key
from gateway.console.api import Answer, ConsoleApi
from gateway.console.dashboard import every_page, platform_dashboard, queue_page
from gateway.console.html import (
    bar_chart,
    definition,
    esc,
    filters,
    layout,
    message,
    pager,
    table,
    usage_bar,
)
from gateway.console.sessions import Session, SessionStore
from gateway.console.stream import Relay, notice
from gateway.console.tenant_forms import create_tenant_form, delete_tenant_form
from gateway.console.throttle import SignInThrottle, buckets_for
from gateway.services import Services

if TYPE_CHECKING:
    from gateway.console.oidc import ConsoleOidc

__all__ = [
    "COOKIE",
    "ConsoleController",
    "ConsoleParts",
    "check_csrf",
    "console_role",
    "oidc_of",
    "sessions_of",
    "set_session_cookie",
    "throttle_of",
]

COOKIE = "ignara_console"
MAX_KEY_CHARS = 16 * 1024
TENANT_ADMIN = "tenant-admin"
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
GRACES = (("old secret: 1 hour", 3600), ("1 day", 86400), ("none", 0))
"""How long a rotated key's old secret keeps working, as the rotate form offers it."""
STATES = ("pending", "admitted", "running", "finished", "failed", "cancelled")

TenantName = Annotated[str, Parameter(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]
KeyId = Annotated[str, Parameter(pattern=r"^[0-9a-f]{1,40}$")]
WorkloadId = Annotated[str, Parameter(pattern=r"^[0-9a-f]{32}$")]
Month = Annotated[str | None, QueryParameter(pattern=r"^[0-9]{4}-[0-9]{2}$", required=False)]
GroupBy = Annotated[
    str | None, QueryParameter(pattern=r"^[a-z]+(,[a-z]+){0,4}$", max_length=64, required=False)
]
State = Annotated[
    str | None, QueryParameter(name="state", pattern=r"^([a-z]{1,20})?$", required=False)
]
Cursor = Annotated[str | None, QueryParameter(max_length=200, required=False)]
# A queue's name (DNS label or subdomain): the live API's cursors.
QueueCursor = Annotated[
    str | None,
    QueryParameter(pattern=r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$", required=False),
]
NameFilter = Annotated[
    str | None,
    QueryParameter(pattern=r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)?$", required=False),
]
Ended = Annotated[str | None, QueryParameter(max_length=8, required=False)]
AuditFilter = Annotated[str | None, QueryParameter(max_length=200, required=False)]
LastEventId = Annotated[
    str | None, HeaderParameter(name="last-event-id", max_length=200, required=False)
]


@dataclass(frozen=True, slots=True)
class ConsoleParts:
    """What the console's routes share: the session store, the sign-in throttle and the
    OIDC sign-in (or ``None``). :func:`gateway.console.console_router` puts it in the
    routes' ``opt``; Litestar deep-copies a router as it registers it, and these hold
    connections and locks: a copy is the same parts."""

    sessions: SessionStore
    throttle: SignInThrottle
    oidc: ConsoleOidc | None = None

    def __deepcopy__(self, memo: dict[int, object]) -> ConsoleParts:
        return self


def _parts(request: Request[Any, Any, Any]) -> ConsoleParts:
    parts: ConsoleParts = request.route_handler.opt["console"]
    return parts


def sessions_of(request: Request[Any, Any, Any]) -> SessionStore:
    """The console's session store."""
    return _parts(request).sessions


def console_role(identity: Identity) -> bool:
    """Whether an identity may have a console session: a platform admin, or a tenant
    admin of a real tenant."""
    return identity.is_admin or (TENANT_ADMIN in identity.roles and identity.tenant != ANY_TENANT)


def throttle_of(request: Request[Any, Any, Any]) -> SignInThrottle:
    """The console's sign-in throttle."""
    return _parts(request).throttle


def oidc_of(request: Request[Any, Any, Any]) -> ConsoleOidc | None:
    """The console's OIDC sign-in, when one is configured."""
    return _parts(request).oidc


def _html(page: str, status: int = 200) -> Response[str]:
    return Response(page, status_code=status, media_type=MediaType.HTML)


def _redirect(path: str) -> Redirect:
    return Redirect(path, status_code=303)


async def _session_of(
    request: Request[Any, Any, Any], store: SessionStore, *, take_flash: bool = False
) -> Session | None:
    return await store.get(request.cookies.get(COOKIE), take_flash=take_flash)


async def check_csrf(request: Request[Any, Any, Any]) -> Response[str] | None:
    """``before_request`` of every console route: a change (POST, PUT, PATCH, DELETE)
    without its session's CSRF token, in the ``csrf`` form field or the ``X-CSRF-Token``
    header, is refused with 403 before its handler runs."""
    if request.method not in UNSAFE:
        return None
    store = sessions_of(request)
    session = await _session_of(request, store)
    candidate = request.headers.get("x-csrf-token")
    if candidate is None:
        form_data = await request.form()
        value = form_data.get("csrf")
        candidate = value if isinstance(value, str) else None
    if session is None or not session.csrf_matches(candidate):
        body = message(
            "error",
            "This change did not carry the page's CSRF token (or your session ended): "
            'reload the page and try again. <a href="/console/login">Sign in</a>',
            test_id="csrf-refused",
        )
        return _html(layout("Refused", body), 403)
    return None


def _nav(session: Session) -> list[tuple[str, str]]:
    tenants = (
        [("Tenants", "/console/tenants"), ("Keys", "/console/keys")]
        if session.platform_admin
        else [("Keys", f"/console/tenants/{session.tenant}")]
    )
    cohorts = [("Cohorts", "/console/cohorts")] if session.platform_admin else []
    platform = (
        [
            ("Flavors", "/console/flavors"),
            ("Models", "/console/models"),
            ("Backends", "/console/backends"),
        ]
        if session.platform_admin
        else []
    )
    settings = [("Settings", "/console/settings")] if session.platform_admin else []
    return [
        ("Dashboard", "/console/dashboard"),
        *cohorts,
        ("Queues", "/console/queues"),
        *platform,
        *tenants,
        ("Workloads", "/console/workloads"),
        ("Usage", "/console/usage"),
        ("Audit", "/console/audit"),
        *settings,
        ("API", "/schema"),
    ]


def _page(
    session: Session, title: str, body: str, current: str, status: int = 200
) -> Response[str]:
    flash = session.take_flash() or ""
    who = f"{session.principal} · " + (
        "platform admin" if session.platform_admin else f"tenant admin of {session.tenant}"
    )
    return _html(
        layout(
            title,
            body,
            who=who,
            csrf=session.csrf,
            nav=_nav(session),
            current=current,
            flash=flash,
        ),
        status,
    )


def _when(value: Any) -> str:
    if not isinstance(value, str) or not value:
        return '<span class="muted">-</span>'
    return f'<time datetime="{esc(value)}">{esc(value[:19].replace("T", " "))}</time>'


def _login_page(
    request: Request[Any, Any, Any],
    session: Session,
    error: str = "",
    status: int = 200,
    retry_after: float | None = None,
) -> Response[str]:
    oidc = oidc_of(request)
    button = (
        '<p class="muted">or</p><p><a class="button primary" href="/console/oidc/login"'
        f' data-testid="oidc-login">Sign in with {esc(oidc.provider_name)}</a></p>'
        if oidc is not None
        else ""
    )
    body = (
        (message("error", esc(error), test_id="login-error") if error else "")
        + '<form method="post" action="/console/login" class="card login">'
        f'<input type="hidden" name="csrf" value="{esc(session.csrf)}">'
        '<label for="key">API key</label>'
        '<input id="key" name="key" type="password" autocomplete="off" required'
        f' maxlength="{MAX_KEY_CHARS}" placeholder="ign_live_... or IGNARA_ADMIN_KEY">'
        '<p class="muted">A platform admin key, or a tenant admin key (its own tenant only).'
        " Member keys have no console.</p>"
        '<button type="submit" class="primary">Sign in</button>'
        f"{button}</form>"
    )
    response = _html(layout("Sign in", body), status)
    if retry_after is not None:
        response.headers["Retry-After"] = str(math.ceil(retry_after))
    return response


class ConsoleController(Controller):
    """``/console``: sign-in, the pages, sign-out."""

    path = "/"
    include_in_schema = False

    async def _session(
        self, request: Request[Any, Any, Any], *, page: bool = True
    ) -> Session | None:
        """The signed-in session; ``page``: the answer is a page, which shows (and so
        takes) the session's one-time message."""
        store = sessions_of(request)
        session = await _session_of(request, store, take_flash=page)
        return session if session is not None and session.signed_in else None

    def _api(self, request: Request[Any, Any, Any], session: Session) -> ConsoleApi:
        assert session.actor is not None  # signed in
        return ConsoleApi(request.app, session.actor)

    async def _failed(
        self, request: Request[Any, Any, Any], session: Session, answer: Answer, current: str
    ) -> Response[Any]:
        """An API refusal, shown; a 401 means the key no longer signs in: sign out."""
        if answer.status == 401:
            await sessions_of(request).drop(session.id)
            return _redirect("/console/login?ended=1")
        body = message("error", esc(answer.error), test_id="api-error")
        status = answer.status if 400 <= answer.status < 600 else 502
        return _page(session, "Refused" if status == 403 else "Error", body, current, status)

    @get("/")
    async def index(self, request: Request[Any, Any, Any]) -> Redirect:
        signed_in = await self._session(request, page=False)
        return _redirect("/console/dashboard" if signed_in else "/console/login")

    @get("/login")
    async def login_form(
        self, request: Request[Any, Any, Any], ended: Ended = None
    ) -> Response[Any]:
        store = sessions_of(request)
        session = await _session_of(request, store)
        if session is not None and session.signed_in:
            return _redirect("/console/dashboard")
        session = session or await store.new()
        error = "Your session ended, or its key no longer signs in." if ended else ""
        return set_session_cookie(request, _login_page(request, session, error), session)

    @post("/login")
    async def login(
        self, request: Request[Any, Any, Any], services: NamedDependency[Services]
    ) -> Response[Any]:
        store = sessions_of(request)
        session = await _session_of(request, store)
        assert session is not None  # check_csrf let it through
        key = (await request.form()).get("key")
        if not isinstance(key, str) or not key.strip() or len(key) > MAX_KEY_CHARS:
            return _login_page(request, session, "Paste an API key.", 400)
        key = key.strip()
        # Counted before the key is looked at: a burst of guesses cannot outrun the count.
        parsed = parse_api_key(key)
        address = request.client.host if request.client else "unknown"
        buckets = buckets_for(address, parsed.key_id if parsed else None)
        throttle = throttle_of(request)
        wait = await throttle.attempt(buckets)
        if wait is not None:
            return _login_page(
                request,
                session,
                f"Too many failed sign-ins from this address or with this key: wait "
                f"{math.ceil(wait)} s before trying again (at most {throttle.limit} tries "
                f"in {throttle.window:g} s).",
                429,
                retry_after=wait,
            )
        try:
            identity, actor = await services.authenticator.sign_in(key)
        except AuthenticationError as err:
            if err.status_code >= 500:  # the gateway's trouble, not a wrong key
                await throttle.succeeded(buckets)
            return _login_page(request, session, err.message, err.status_code)
        if not console_role(identity):
            return _login_page(
                request,
                session,
                "This key is a member's: the console is for platform and tenant admins.",
                403,
            )
        await throttle.succeeded(buckets)
        signed = await store.sign_in(session, actor)
        return set_session_cookie(request, _redirect("/console/dashboard"), signed)

    @post("/logout")
    async def logout(self, request: Request[Any, Any, Any]) -> Response[Any]:
        store = sessions_of(request)
        session = await _session_of(request, store)
        if session is not None:
            await store.drop(session.id)
        response = _redirect("/console/login")
        response.delete_cookie(COOKIE, path="/console")
        return response

    @get("/dashboard")
    async def dashboard(
        self, request: Request[Any, Any, Any], cursor: QueueCursor = None
    ) -> Response[Any]:
        session = await self._session(request)
        if session is None:
            return _redirect("/console/login")
        api = self._api(request, session)
        here = "/console/dashboard"
        if session.platform_admin:
            month = datetime.now(UTC).strftime("%Y-%m")
            page = queue_page(cursor)
            # The totals and one page of queues, never the whole config: a dashboard
            # of a thousand queues answers as fast as one of ten.
            summary, live, usage = await asyncio.gather(
                api.get("/api/v1/admin/summary"),
                api.get("/api/v1/admin/queues", **page),
                api.get("/api/v1/usage", month=month, tenant="*", group_by="tenant"),
            )
            if summary.status == 401:
                return await self._failed(request, session, summary, here)
            spent = _usage(usage.body, month, "tenant", form_too=False) if usage.ok else ""
            body = platform_dashboard(summary, live, _live(live), cursor, _queue_link)
            body += f"<h2>This month, per tenant</h2>{spent}"
        else:
            tenant_body = await _tenant_dashboard(api, session)
            if isinstance(tenant_body, Answer):
                return await self._failed(request, session, tenant_body, here)
            body = tenant_body
        return _page(session, "Dashboard", body, here)

    @get("/dashboard/live")
    async def dashboard_live(
        self, request: Request[Any, Any, Any], cursor: QueueCursor = None
    ) -> Response[Any]:
        """The dashboard's live table alone (the same page of queues), for the page's
        script to swap in when the event stream says something changed."""
        session = await self._session(request, page=False)
        if session is None:
            return _html(message("error", "Signed out."), 401)
        api = self._api(request, session)
        if session.platform_admin:
            answer = await api.get("/api/v1/admin/queues", **queue_page(cursor))
        else:
            answer = await api.get("/api/v1/admin/queues")
        return _html(_live(answer, quiet=not session.platform_admin))

    @get("/events")
    async def events(
        self, request: Request[Any, Any, Any], last_event_id: LastEventId = None
    ) -> Response[Any]:
        """The API's event stream, relayed with the session's key. Where this gateway
        serves none, 204, which tells EventSource to stop asking; where the API refuses
        one (too many open, the live state away), a stream of one ``unavailable`` event
        saying why, for the page to show (:func:`gateway.console.stream.notice`)."""
        session = await self._session(request, page=False)
        if session is None:
            return _html(message("error", "Signed out."), 401)
        assert session.actor is not None
        relay = Relay(request.app, session.actor, last_event_id=last_event_id)
        status = await relay.start()
        if status == 404:
            return Response(b"", status_code=204)
        if relay.refusal is not None:
            return Response(
                notice(relay.refusal),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        return Stream(relay.chunks(), media_type="text/event-stream")

    @get("/cohorts")
    async def cohorts(self, request: Request[Any, Any, Any]) -> Response[Any]:
        """The cohort tree: each cohort's subtree quota, usage, borrowing and lending per
        flavor and resource, and its queues beneath it (platform admins: a cohort holds
        other tenants' queues)."""
        session = await self._session(request)
        if session is None:
            return _redirect("/console/login")
        here = "/console/cohorts"
        if not session.platform_admin:
            return _redirect("/console/dashboard")
        api = self._api(request, session)
        # Every cohort and every queue, page after page: a tree cut at a page's end
        # would show half the platform as if it were all of it.
        cohorts, queues = await asyncio.gather(
            every_page(api, "/api/v1/admin/cohorts"), every_page(api, "/api/v1/admin/queues")
        )
        if not cohorts.ok:
            return await self._failed(request, session, cohorts, here)
        # Imported here: that module's pages build on this one's helpers.
        from gateway.console.cohorts_flavors import cohort_section

        body = cohort_tree(cohorts.body, queues.body if queues.ok else None)
        body += await cohort_section(api, session)
        return _page(session, "Cohorts", body, here)

    @get("/audit")
    async def audit(
        self,
        request: Request[Any, Any, Any],
        actor: AuditFilter = None,
        kind: AuditFilter = None,
        name: AuditFilter = None,
        action: AuditFilter = None,
        tenant: AuditFilter = None,
        cursor: Cursor = None,
    ) -> Response[Any]:
        """The audit log, newest first, filtered as ``GET /api/v1/admin/audit`` filters.
        A tenant admin reads its own tenant's entries only (the API scopes them), so it
        has no tenant filter."""
        session = await self._session(request)
        if session is None:
            return _redirect("/console/login")
        here = "/console/audit"
        names = (
            "actor",
            "kind",
            "name",
            "action",
            *(("tenant",) if session.platform_admin else ()),
        )
        given = {"actor": actor, "kind": kind, "name": name, "action": action, "tenant": tenant}
        chosen = {k: v for k in names if (v := given[k])}
        params = {**chosen, "limit": "100", **({"cursor": cursor} if cursor else {})}
        answer = await self._api(request, session).get("/api/v1/admin/audit", **params)
        if not answer.ok:
            return await self._failed(request, session, answer, here)
        inputs = "".join(
            f'<label for="f-{f}">{f}</label><input id="f-{f}" name="{f}" size="12"'
            f' maxlength="200" value="{esc(chosen.get(f, ""))}">'
            for f in names
        )
        picker = filters(here, inputs)
        rows = [
            (
                _when(e.get("at")),
                esc(e.get("actor")),
                esc(e.get("action")),
                esc(e.get("kind")),
                esc(e.get("name")),
                esc(e.get("tenant") or ""),
                f"<code>{esc(_detail(e.get('detail')))}</code>",
            )
            for e in _items(answer.body)
        ]
        next_cursor = answer.body.get("next_cursor") if isinstance(answer.body, dict) else None
        more = pager(here, chosen, next_cursor, label="older")
        headers = ["at", "actor", "action", "kind", "name", "tenant", "detail"]
        scope = (
            ""
            if session.platform_admin
            else f'<p class="muted">Tenant {esc(session.tenant)}\'s entries only.</p>'
        )
        body = scope + picker + table(headers, rows, test_id="audit") + more
        return _page(session, "Audit log", body, here)

    @get("/tenants")
    async def tenants(
        self, request: Request[Any, Any, Any], cursor: Cursor = None
    ) -> Response[Any]:
        session = await self._session(request)
        if session is None:
            return _redirect("/console/login")
        here = "/console/tenants"
        if not session.platform_admin:
            return _redirect(f"/console/tenants/{session.tenant}")
        params = {"limit": "100", **({"cursor": cursor} if cursor else {})}
        answer = await self._api(request, session).get("/api/v1/admin/tenants", **params)
        if not answer.ok:
            return await self._failed(request, session, answer, here)
        rows = [
            (
                f'<a href="/console/tenants/{quote(str(t.get("name")))}">{esc(t.get("name"))}</a>',
                esc(t.get("display_name")),
                ", ".join(_queue_link(q) for q in t.get("queues", [])),
                delete_tenant_form(session.csrf, t["name"], t.get("version", "")),
            )
            for t in _items(answer.body)
        ]
        body = (
            table(["tenant", "display name", "queues", ""], rows, test_id="tenants")
            + pager(here, {}, answer.body.get("next_cursor"))
            + f'<h2>New tenant</h2><div class="card">{create_tenant_form(session.csrf)}</div>'
        )
        return _page(session, "Tenants", body, here)

    @get("/usage")
    async def usage(
        self, request: Request[Any, Any, Any], month: Month = None, group_by: GroupBy = None
    ) -> Response[Any]:
        session = await self._session(request)
        if session is None:
            return _redirect("/console/login")
        here = "/console/usage"
        month = month or datetime.now(UTC).strftime("%Y-%m")
        params = {
            "month": month,
            "group_by": group_by or ("tenant" if session.platform_admin else "queue"),
        }
        if session.platform_admin:
            params["tenant"] = "*"
        answer = await self._api(request, session).get("/api/v1/usage", **params)
        if not answer.ok:
            return await self._failed(request, session, answer, here)
        body = _usage(answer.body, month, params["group_by"])
        return _page(session, "Usage and chargeback", body, here)


def set_session_cookie(
    request: Request[Any, Any, Any], response: Response[Any], session: Session
) -> Response[Any]:
    response.set_cookie(
        COOKIE,
        session.id,
        path="/console",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


def _activity(activity: Any) -> str:
    """A key's recent use, and its idle and anomalous flags with why."""
    if not isinstance(activity, dict):
        return '<span class="muted">-</span>'
    use = (
        f"{esc(activity.get('calls_7d', 0))} calls 7d · {esc(activity.get('calls_30d', 0))} 30d"
        f"<br>{esc(activity.get('tokens_30d', 0))} tokens 30d"
    )
    flags = "".join(
        f'<div class="flag {kind}" data-testid="flag-{kind}">{kind}: '
        f"{esc(activity.get(kind + '_reason') or '')}</div>"
        for kind in ("idle", "anomalous")
        if activity.get(kind)
    )
    return use + flags


def _requests(pod_sets: Sequence[dict[str, Any]]) -> str:
    return "; ".join(
        f"{p.get('count', 1)} x "
        + ", ".join(f"{k}={v}" for k, v in (p.get("requests") or {}).items())
        for p in pod_sets
    )


def _detail(detail: Any) -> str:
    if not isinstance(detail, dict):
        return ""
    return ", ".join(f"{k}={v}" for k, v in detail.items())[:300]


def _live(answer: Answer, *, quiet: bool = False) -> str:
    """The live queue state (``GET /api/v1/admin/queues``): per queue its admitted and
    pending counts, the oldest pending workload, and per flavor and resource a bar of
    its usage against its nominal quota, with what it borrows and lends. ``quiet``: say
    nothing when the endpoint is not there or refuses."""
    # 404/405: no such route; 400: a router that takes "queues" for something else
    # (an object kind) and refuses it.
    if answer.status in (400, 404, 405):
        if quiet:
            return ""
        return message(
            "note", "Live usage appears here once this gateway serves GET /api/v1/admin/queues."
        )
    if not answer.ok:
        return "" if quiet else message("error", esc(answer.error))
    items = answer.body.get("items") if isinstance(answer.body, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return message("note", "The live endpoint answered in a shape this console does not know.")
    rows = []
    for queue in items:
        oldest = queue.get("oldest_pending") or {}
        head = [
            f"<strong>{_queue_link(queue.get('name'))}</strong>",
            esc(queue.get("cohort") or ""),
            esc(queue.get("admitted", "")),
            esc(queue.get("pending", "")),
            _when(oldest.get("created_at")) if oldest else '<span class="muted">-</span>',
        ]
        levels = [r for r in queue.get("resources") or [] if isinstance(r, dict)] or [{}]
        for i, level in enumerate(levels):
            cells = head if i == 0 else ["", "", "", "", ""]
            rows.append(
                [
                    *cells,
                    esc(level.get("flavor", "")),
                    esc(level.get("resource", "")),
                    usage_bar(level.get("usage"), level.get("nominal"), level.get("borrowed")),
                    esc(_number(level.get("borrowed"))),
                    esc(_number(level.get("lent"))),
                ]
            )
    more = ""
    if answer.body.get("next_cursor"):
        more = '<p class="muted">More queues than shown: one page of them.</p>'
    as_of = answer.body.get("as_of")
    source = f'<p class="muted">as of {_when(as_of)} ({esc(answer.body.get("source", ""))})</p>'
    headers = ["queue", "cohort", "admitted", "pending", "oldest pending", "flavor", "resource"]
    return (
        source
        + table([*headers, "usage / nominal", "borrowed", "lent"], rows, test_id="live")
        + more
    )


def _queue_link(name: Any) -> str:
    """A queue's name, linked to its page (its quotas, and their editor)."""
    return f'<a href="/console/queues/{quote(str(name))}">{esc(name)}</a>'


def _number(value: Any) -> str:
    """A quantity as the API gives it, without a float's trailing ``.0``."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None else str(value)


def _items(body: Any) -> list[dict[str, Any]]:
    items = body.get("items") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return []
    return [i for i in items if isinstance(i, dict)]


def _levels(levels: Any, *, subtree: bool) -> str:
    """A node's levels (flavor, resource) as rows: usage against its (subtree's) nominal
    quota as a bar, what it borrows and lends."""
    rows = [
        (
            esc(level.get("flavor", "")),
            esc(level.get("resource", "")),
            usage_bar(
                level.get("usage"),
                level.get("subtree_nominal") if subtree else level.get("nominal"),
                level.get("borrowed"),
            ),
            esc(_number(level.get("borrowed"))),
            esc(_number(level.get("lent"))),
        )
        for level in levels or []
        if isinstance(level, dict)
    ]
    if not rows:
        return ""
    quota = "usage / subtree quota" if subtree else "usage / nominal"
    return table(["flavor", "resource", quota, "borrowed", "lent"], rows)


def cohort_tree(cohorts: Any, queues: Any) -> str:
    """The cohorts (``GET /api/v1/admin/cohorts``) as a tree from its roots, each with
    its levels and its queues (``GET /api/v1/admin/queues``) beneath it."""
    nodes = {str(c.get("name")): c for c in _items(cohorts)}
    children: dict[str | None, list[str]] = defaultdict(list)
    for name, node in sorted(nodes.items()):
        parent = node.get("parent")
        children[parent if parent in nodes else None].append(name)
    by_cohort: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for queue in _items(queues):
        by_cohort[queue.get("cohort")].append(queue)

    def queue_node(queue: dict[str, Any]) -> str:
        counts = (
            f"{esc(queue.get('admitted', 0))} admitted · {esc(queue.get('pending', 0))} pending"
        )
        return (
            f'<li class="queue" data-testid="tree-queue"><strong>{_queue_link(queue.get("name"))}'
            "</strong>"
            f' <span class="muted">queue · {counts}</span>'
            f"{_levels(queue.get('resources'), subtree=False)}</li>"
        )

    def cohort_node(name: str, seen: frozenset[str]) -> str:
        if name in seen:  # a cycle in what the API said: stop rather than recurse forever
            return ""
        node = nodes[name]
        counts = f"{esc(node.get('admitted', 0))} admitted · {esc(node.get('pending', 0))} pending"
        inner = "".join(cohort_node(child, seen | {name}) for child in children.get(name, []))
        inner += "".join(queue_node(q) for q in by_cohort.get(name, []))
        return (
            f'<li class="cohort" data-testid="tree-cohort"><strong>'
            f'<a href="/console/cohorts/{quote(name)}">{esc(name)}</a></strong>'
            f' <span class="muted">cohort · {counts}</span>'
            f"{_levels(node.get('resources'), subtree=True)}"
            + (f'<ul class="tree">{inner}</ul>' if inner else "")
            + "</li>"
        )

    roots = "".join(cohort_node(name, frozenset()) for name in children.get(None, []))
    alone = "".join(queue_node(q) for q in by_cohort.get(None, []))
    if not roots and not alone:
        return message("note", "No cohorts or queues yet.")
    return f'<ul class="tree" data-testid="cohort-tree">{roots}{alone}</ul>'


async def _tenant_dashboard(api: ConsoleApi, session: Session) -> str | Answer:
    counts = []
    for state in ("pending", "admitted", "running"):
        answer = await api.get("/api/v1/workloads", state=state, limit="500")
        if not answer.ok:
            return answer
        n = len(answer.body["items"])
        shown = f"{n}+" if answer.body.get("next_cursor") else str(n)
        counts.append((state, f'<span data-testid="count-{state}">{esc(shown)}</span>'))
    month = datetime.now(UTC).strftime("%Y-%m")
    usage = await api.get("/api/v1/usage", month=month, group_by="queue")
    spent = _usage(usage.body, month, "queue", form_too=False) if usage.ok else ""
    live = _live(await api.get("/api/v1/admin/queues"), quiet=True)
    return (
        f'<section class="cards">{definition(counts)}</section>'
        + (
            f'<h2>Live usage</h2><div id="live" data-source="/console/dashboard/live">{live}</div>'
            if live
            else ""
        )
        + f"<h2>This month, per queue</h2>{spent}"
    )


def _usage(report: dict[str, Any], month: str, group_by: str, *, form_too: bool = True) -> str:
    """The chargeback report as a table and one bar chart per resource (and money)."""
    keys: list[str] = report.get("group_by", [])
    resources = sorted({r for row in report.get("rows", []) for r in row.get("amounts", {})})
    currency = report.get("currency")
    rows = []
    per_resource: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for row in report.get("rows", []):
        label = " / ".join(str(row["group"].get(k) or "-") for k in keys) or "all"
        amounts = row.get("amounts", {})
        for resource, amount in amounts.items():
            per_resource[resource][label] += _decimal(amount)
        if currency and row.get("money") is not None:
            per_resource[f"money ({currency})"][label] += _decimal(row["money"])
        rows.append(
            [esc(row.get("period")), *(esc(row["group"].get(k) or "-") for k in keys)]
            + [esc(amounts.get(r, "")) for r in resources]
            + ([esc(row.get("money") or "")] if currency else [])
        )
    headers = ["period", *keys, *resources] + ([f"money ({currency})"] if currency else [])
    totals = report.get("totals", {})
    total = definition(
        [(r, esc(a)) for r, a in totals.get("amounts", {}).items()]
        + ([(f"total ({currency})", esc(totals.get("money")))] if currency else [])
    )
    charts = "".join(
        bar_chart(resource, [(k, str(v)) for k, v in sorted(values.items())])
        for resource, values in sorted(per_resource.items())
    )
    picker = ""
    if form_too:
        choices = ["tenant", "queue", "flavor", "model", "resource"]
        options = "".join(
            f'<option value="{c}"{" selected" if c == group_by else ""}>{c}</option>'
            for c in choices
        )
        picker = (
            '<form method="get" action="/console/usage" class="inline filters">'
            f'<label for="month">month</label><input id="month" name="month" value="{esc(month)}"'
            ' pattern="[0-9]{4}-[0-9]{2}" size="8">'
            f'<label for="group_by">group by</label><select id="group_by" name="group_by">'
            f'{options}</select><button type="submit">Show</button></form>'
        )
    # No totals (nothing used that month): no empty card above the table's "none".
    cards = f'<section class="cards">{total}</section>' if totals.get("amounts") else ""
    return f"{picker}{cards}{charts}" + table(headers, rows, test_id="usage")


def _decimal(text: Any) -> Decimal:
    try:
        return Decimal(str(text))
    except (InvalidOperation, ValueError):
        return Decimal(0)
