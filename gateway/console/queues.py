"""The console's queues: a page of them at a time, and one queue's detail with its
quota editor.

The editor previews a change before saving it (``POST .../cluster-queues/{name}/preview``:
what the next admission pass would admit and preempt, by the engine) and saves it with
``PUT`` and ``If-Match`` on the version the page was read at, so an admin who edits a
queue someone else changed meanwhile is told, not silently overwritten."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Annotated, Any
from urllib.parse import quote

from litestar import Request, Response, get, post
from litestar.params import Parameter, QueryParameter

from gateway.console.api import Answer, ConsoleApi
from gateway.console.base import ConsolePages, FormError, page, redirect
from gateway.console.html import definition, esc, field, filters, form, message, pager, table
from gateway.console.html import usage_bar as bar
from gateway.console.pages import _items, _number, _when
from gateway.console.sessions import Session

__all__ = ["QueuePages", "quota_cells"]

QueueName = Annotated[str, Parameter(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]
CohortFilter = Annotated[
    str | None, QueryParameter(pattern=r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$", required=False)
]
Cursor = Annotated[str | None, QueryParameter(max_length=253, required=False)]
PAGE = 50
LIMITS = ("nominal", "borrowing_limit", "lending_limit")
# A quantity as the config file takes it: 4, 1.5, 500m, 64Gi.
QUANTITY = re.compile(r"^[0-9]{1,15}(\.[0-9]{1,9})?([A-Za-z]{1,3})?$")
QUANTITY_PATTERN = r"[0-9]{1,15}(\.[0-9]{1,9})?([A-Za-z]{1,3})?"


def quota_cells(spec: dict[str, Any]) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """Each (field key, flavor, resource, quota) of a cluster queue's spec, in its order;
    the key names the form fields of that quota."""
    for g, group in enumerate(spec.get("resource_groups") or []):
        if not isinstance(group, dict):
            continue
        for f, flavor in enumerate(group.get("flavors") or []):
            if not isinstance(flavor, dict):
                continue
            for r, (resource, quota) in enumerate((flavor.get("quotas") or {}).items()):
                shaped = quota if isinstance(quota, dict) else {"nominal": quota}
                yield f"{g}-{f}-{r}", str(flavor.get("name")), str(resource), shaped


def edited(spec: dict[str, Any], data: Any) -> dict[str, Any]:
    """The spec with the quotas the form says; raises :class:`FormError` on a value
    that is no quantity (the API checks the rest: limits against each other, flavors)."""
    changed = copy.deepcopy(spec)
    changed.pop("name", None)
    for g, group in enumerate(changed.get("resource_groups") or []):
        for f, flavor in enumerate(group.get("flavors") or []):
            quotas = flavor.get("quotas") or {}
            for r, resource in enumerate(list(quotas)):
                quota = quotas[resource] if isinstance(quotas[resource], dict) else {}
                quota = dict(quota)
                for limit in LIMITS:
                    raw = data.get(f"{limit}-{g}-{f}-{r}")
                    text = raw.strip() if isinstance(raw, str) else ""
                    if not text:
                        if limit == "nominal":
                            raise FormError(f"{flavor.get('name')} {resource}: nominal is required")
                        quota.pop(limit, None)
                        continue
                    if not QUANTITY.match(text):
                        raise FormError(
                            f"{flavor.get('name')} {resource} {limit.replace('_', ' ')}: "
                            f"{text[:40]!r} is not a quantity (as 4, 1.5, 500m or 64Gi)"
                        )
                    quota[limit] = int(text) if text.isdigit() else text
                quotas[resource] = quota
    return changed


class QueuePages(ConsolePages):
    @get("/queues")
    async def queues(
        self, request: Request[Any, Any, Any], cohort: CohortFilter = None, cursor: Cursor = None
    ) -> Response[Any]:
        """The queues' live state, a page at a time (the API pages them by name)."""
        session = await self.signed_in(request)
        here = "/console/queues"
        params = {"limit": str(PAGE)}
        kept = {"cohort": cohort} if cohort else {}
        answer = await self.api(request, session).get(
            "/api/v1/admin/queues", **params, **kept, **({"cursor": cursor} if cursor else {})
        )
        if not answer.ok:
            return await self.failed(request, session, answer, here)
        rows = []
        for queue in _items(answer.body):
            name = str(queue.get("name"))
            levels = [lv for lv in queue.get("resources") or [] if isinstance(lv, dict)]
            rows.append(
                (
                    f'<a href="/console/queues/{quote(name)}">{esc(name)}</a>',
                    esc(queue.get("cohort") or ""),
                    esc(", ".join(queue.get("tenants") or [])),
                    esc(queue.get("admitted", "")),
                    esc(queue.get("pending", "")),
                    "<br>".join(
                        f"{esc(lv.get('flavor'))} {esc(lv.get('resource'))}: "
                        + bar(lv.get("usage"), lv.get("nominal"), lv.get("borrowed"))
                        for lv in levels
                    ),
                )
            )
        picker = filters(
            here, field("cohort", "cohort", cohort or "", maxlength=253, placeholder="any")
        )
        body = (
            picker
            + table(
                ["queue", "cohort", "tenants", "admitted", "pending", "usage / nominal"],
                rows,
                test_id="queues",
            )
            + pager(here, kept, answer.body.get("next_cursor"))
        )
        return page(session, "Queues", body, here)

    @get("/queues/{name:str}")
    async def queue(self, request: Request[Any, Any, Any], name: QueueName) -> Response[Any]:
        session = await self.signed_in(request)
        return await self._detail(request, session, name)

    @post("/queues/{name:str}/preview")
    async def preview(self, request: Request[Any, Any, Any], name: QueueName) -> Response[Any]:
        """What the edited quotas would admit and preempt; nothing is saved."""
        session = await self.signed_in(request)
        data = await request.form()
        api = self.api(request, session)
        config = await _config(api, name)
        if not config.ok:
            return await self.failed(request, session, config, "/console/queues")
        version = _version_in(data)
        try:
            spec = edited(config.body["spec"], data)
        except FormError as err:
            return await self._detail(request, session, name, data=data, error=str(err))
        headers = {"If-Match": f'"{version}"'} if version else None
        answer = await api.call(
            "POST",
            f"/api/v1/admin/config/cluster-queues/{name}/preview",
            json=spec,
            headers=headers,
        )
        if answer.status == 412:
            return await self._detail(request, session, name, error=_stale(answer), status=412)
        if not answer.ok:
            return await self._detail(
                request, session, name, data=data, error=answer.error, status=answer.status
            )
        return await self._detail(request, session, name, data=data, preview=answer.body)

    @post("/queues/{name:str}/save")
    async def save(self, request: Request[Any, Any, Any], name: QueueName) -> Response[Any]:
        session = await self.signed_in(request)
        data = await request.form()
        api = self.api(request, session)
        config = await _config(api, name)
        if not config.ok:
            return await self.failed(request, session, config, "/console/queues")
        version = _version_in(data)
        if version is None:
            return await self._detail(
                request, session, name, data=data, error="This form lost its version: reload."
            )
        try:
            spec = edited(config.body["spec"], data)
        except FormError as err:
            return await self._detail(request, session, name, data=data, error=str(err))
        answer = await api.call(
            "PUT",
            f"/api/v1/admin/config/cluster-queues/{name}",
            json=spec,
            headers={"If-Match": f'"{version}"'},
        )
        if answer.status == 412:
            return await self._detail(request, session, name, error=_stale(answer), status=412)
        if not answer.ok:
            if answer.status == 401:
                return await self.failed(request, session, answer, "/console/queues")
            return await self._detail(
                request, session, name, data=data, error=answer.error, status=answer.status
            )
        await self.flash(
            request,
            session,
            message(
                "ok",
                f"Saved queue {esc(name)} (version {esc(answer.body.get('version'))}).",
                test_id="saved",
            ),
        )
        return redirect(f"/console/queues/{quote(name)}")

    async def _detail(
        self,
        request: Request[Any, Any, Any],
        session: Session,
        name: str,
        *,
        data: Any = None,
        preview: Any = None,
        error: str = "",
        status: int = 200,
    ) -> Response[Any]:
        here = "/console/queues"
        api = self.api(request, session)
        live = await api.get(f"/api/v1/admin/queues/{name}")
        config = await _config(api, name) if session.platform_admin else None
        if config is not None and not config.ok:
            return await self.failed(request, session, config, here)
        if config is None and not live.ok:
            return await self.failed(request, session, live, here)
        state = live.body if live.ok and isinstance(live.body, dict) else {}
        levels = {
            (str(lv.get("flavor")), str(lv.get("resource"))): lv
            for lv in state.get("resources") or []
            if isinstance(lv, dict)
        }
        facts = definition(
            [
                ("cohort", esc(state.get("cohort") or "")),
                ("tenants", esc(", ".join(state.get("tenants") or []))),
                (
                    "admitted",
                    f'<span data-testid="admitted">{esc(state.get("admitted", ""))}</span>',
                ),
                ("pending", f'<span data-testid="pending">{esc(state.get("pending", ""))}</span>'),
                (
                    "oldest pending",
                    _when((state.get("oldest_pending") or {}).get("created_at")),
                ),
            ]
        )
        shown = error and message("error", esc(error), test_id="form-error")
        if config is None:  # a tenant admin: the live state of its own queue, no editor
            rows = [
                (
                    esc(lv.get("flavor")),
                    esc(lv.get("resource")),
                    esc(_number(lv.get("nominal"))),
                    esc(_number(lv.get("borrowing_limit"))),
                    esc(_number(lv.get("lending_limit"))),
                    bar(lv.get("usage"), lv.get("nominal"), lv.get("borrowed")),
                    esc(_number(lv.get("borrowed"))),
                    esc(_number(lv.get("lent"))),
                )
                for lv in levels.values()
            ]
            body = f'<section class="cards">{facts}</section>' + table(
                HEADERS, rows, test_id="quota"
            )
            return page(session, f"Queue {name}", shown + body, here, status)
        spec, version = config.body["spec"], config.body["version"]
        cells: list[tuple[str, ...]] = []
        for key, flavor, resource, quota in quota_cells(spec):
            lv = levels.get((flavor, resource), {})
            inputs = []
            for limit in LIMITS:
                value = data.get(f"{limit}-{key}") if data is not None else None
                value = value if isinstance(value, str) else _number(quota.get(limit))
                label = f"{flavor} {resource} {limit.replace('_', ' ')}"
                inputs.append(
                    f'<input name="{limit}-{esc(key)}" value="{esc(value)}" size="8"'
                    f' maxlength="30" pattern="{QUANTITY_PATTERN}" aria-label="{esc(label)}"'
                    f' data-testid="{limit}-{esc(flavor)}-{esc(resource)}"'
                    + (" required" if limit == "nominal" else ' placeholder="none"')
                    + ">"
                )
            cells.append(
                (
                    esc(flavor),
                    esc(resource),
                    *inputs,
                    bar(lv.get("usage"), lv.get("nominal"), lv.get("borrowed")),
                    esc(_number(lv.get("borrowed"))),
                    esc(_number(lv.get("lent"))),
                )
            )
        action = f"/console/queues/{quote(name)}"
        editor = form(
            f"{action}/save",
            session.csrf,
            f'<input type="hidden" name="version" value="{esc(version)}">'
            + table(HEADERS, cells, test_id="quota"),
            button="Save",
            more=f'<button type="submit" formaction="{esc(action)}/preview">Preview</button>',
            test_id="quota-editor",
            css="editor",
        )
        body = (
            f'<section class="cards">{facts}</section>'
            f'<p class="muted">version {esc(version)} · '
            f'<a href="/console/workloads?queue={quote(name)}">its workloads</a></p>'
            + (_preview(preview) if preview is not None else "")
            + "<h2>Quota per flavor and resource</h2>"
            + '<p class="muted">Empty limits mean none. Preview shows what the next admission'
            " pass would admit and preempt with these numbers; nothing is saved until Save.</p>"
            + editor
        )
        return page(session, f"Queue {name}", shown + body, here, status)


HEADERS = [
    "flavor",
    "resource",
    "nominal",
    "borrowing limit",
    "lending limit",
    "usage / nominal",
    "borrowed",
    "lent",
]


async def _config(api: ConsoleApi, name: str) -> Answer:
    answer = await api.get(f"/api/v1/admin/config/cluster-queues/{name}")
    if answer.ok and not (
        isinstance(answer.body, dict) and isinstance(answer.body.get("spec"), dict)
    ):
        return Answer(502, None)
    return answer


def _version_in(data: Any) -> int | None:
    raw = data.get("version")
    return int(raw) if isinstance(raw, str) and raw.isdigit() and len(raw) <= 18 else None


def _stale(answer: Answer) -> str:
    return (
        "Not saved: someone changed this queue since you opened it. The form now shows "
        f"their version; make your change again if it still holds. ({answer.error})"
    )


def _preview(body: Any) -> str:
    if not isinstance(body, dict):
        return message("error", "The preview answered in a shape this console does not know.")

    def rows(items: Any, *, by: bool) -> list[tuple[str, ...]]:
        return [
            (
                f"<code>{esc(w.get('id'))}</code>",
                esc(w.get("name")),
                esc(w.get("tenant")),
                esc(w.get("queue")),
                "this change" if w.get("because_of_change") else "the next pass anyway",
                *([f"<code>{esc(w.get('by') or '')}</code>"] if by else []),
            )
            for w in items or []
            if isinstance(w, dict)
        ]

    headers = ["id", "name", "tenant", "queue", "because of"]
    admitted, preempted = body.get("admitted_count", 0), body.get("preempted_count", 0)
    return (
        '<section class="card preview" data-testid="preview"><h2>Preview</h2>'
        f"<p>With these quotas the next admission pass would admit <strong data-testid="
        f'"preview-admitted-count">{esc(admitted)}</strong> and preempt <strong data-testid='
        f'"preview-preempted-count">{esc(preempted)}</strong> workload(s); '
        f"{esc(body.get('still_pending', 0))} would still wait in this queue. Nothing is saved.</p>"
        "<h3>Admitted</h3>"
        + table(headers, rows(body.get("admitted"), by=False), test_id="preview-admitted")
        + "<h3>Preempted</h3>"
        + table(
            [*headers, "to make room for"],
            rows(body.get("preempted"), by=True),
            test_id="preview-preempted",
        )
        + "</section>"
    )
