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
from gateway.console.base import FormError, form_text, page, showing_error
from gateway.console.html import (
    definition,
    esc,
    field,
    filters,
    form,
    form_error,
    message,
    pager,
    select,
    table,
    version_field,
)
from gateway.console.html import usage_bar as bar
from gateway.console.pages import _items, _number, _when
from gateway.console.quota_grid import PlatformPages, every_object, grid, groups_from_form
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


STRATEGIES = ("BestEffortFIFO", "StrictFIFO")
WITHIN_QUEUE = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
RECLAIM = ("Never", "LowerPriority", "Any")
BORROW = ("Never", "LowerPriority")
CHOICES = (
    ("queueing_strategy", STRATEGIES),
    ("within_cluster_queue", WITHIN_QUEUE),
    ("reclaim_within_cohort", RECLAIM),
    ("borrow_within_cohort", BORROW),
)


def queue_spec(data: Any, current: dict[str, Any] | None = None) -> dict[str, Any]:
    """A cluster queue's spec as the form says it (no ``name``), over ``current`` (what
    the form does not show, as flavor fungibility, stays); :class:`FormError` names the
    field at fault (the API checks the rest)."""
    spec = {k: v for k, v in (current or {}).items() if k != "name"}
    spec.pop("cohort", None)
    cohort = form_text(data, "cohort", max_length=63, required=False)
    if cohort:
        spec["cohort"] = cohort
    chosen = {}
    for name, allowed in CHOICES:
        value = form_text(data, name, max_length=40, required=False) or allowed[0]
        if value not in allowed:
            raise FormError(f"{name.replace('_', ' ')}: one of {', '.join(allowed)}")
        chosen[name] = value
    spec["queueing_strategy"] = chosen["queueing_strategy"]
    before: dict[str, Any] = spec.get("preemption") or {}
    before = before if isinstance(before, dict) else {}
    preemption: dict[str, Any] = {
        "within_cluster_queue": chosen["within_cluster_queue"],
        "reclaim_within_cohort": chosen["reclaim_within_cohort"],
    }
    if chosen["borrow_within_cohort"] != "Never":
        kept = before.get("borrow_within_cohort")
        same = isinstance(kept, dict) and kept.get("policy") == chosen["borrow_within_cohort"]
        preemption["borrow_within_cohort"] = (
            kept if same else {"policy": chosen["borrow_within_cohort"]}
        )
    spec["preemption"] = preemption
    spec.pop("fair_weight", None)
    weight = form_text(data, "fair_weight", max_length=30, required=False)
    if weight:
        if not QUANTITY.match(weight):
            raise FormError(f"fair-sharing weight: {weight[:40]!r} is not a quantity")
        spec["fair_weight"] = int(weight) if weight.isdigit() else weight
    spec["resource_groups"] = groups_from_form(data)
    if not spec["resource_groups"]:
        raise FormError("quotas: give at least one flavor, resource and nominal quota")
    return spec


def new_queue_spec(data: Any) -> dict[str, Any]:
    """A new cluster queue's spec as the form says it, ``name`` included."""
    return {"name": form_text(data, "name", max_length=63), **queue_spec(data)}


def _values_of(spec: dict[str, Any]) -> dict[str, str]:
    """A queue's spec as its form's values."""
    preemption: dict[str, Any] = spec.get("preemption") or {}
    preemption = preemption if isinstance(preemption, dict) else {}
    borrow = preemption.get("borrow_within_cohort")
    return {
        "cohort": str(spec.get("cohort") or ""),
        "queueing_strategy": str(spec.get("queueing_strategy") or STRATEGIES[0]),
        "within_cluster_queue": str(preemption.get("within_cluster_queue") or "Never"),
        "reclaim_within_cohort": str(preemption.get("reclaim_within_cohort") or "Never"),
        "borrow_within_cohort": str(
            (borrow.get("policy") if isinstance(borrow, dict) else None) or "Never"
        ),
        "fair_weight": _number(spec.get("fair_weight")),
    }


def queue_fields(
    cohorts: list[str], flavors: list[str], *, data: Any, spec: dict[str, Any] | None = None
) -> str:
    """The fields of a queue's form: as typed (``data``), else as ``spec`` says."""
    values = data if data is not None else _values_of(spec or {})

    def chosen(name: str, default: str) -> str:
        value = values.get(name)
        return value if isinstance(value, str) and value else default

    labels = {
        "queueing_strategy": "queueing",
        "within_cluster_queue": "preempt within the queue",
        "reclaim_within_cohort": "reclaim within the cohort",
        "borrow_within_cohort": "preempt to borrow",
    }
    current = chosen("cohort", "")
    return (
        select(
            "cohort",
            "cohort",
            ["", *cohorts, *([current] if current and current not in cohorts else [])],
            current,
            empty="(none)",
        )
        + "".join(
            select(name, labels[name], allowed, chosen(name, allowed[0]))
            for name, allowed in CHOICES
        )
        + field(
            "fair_weight",
            "fair-sharing weight",
            values.get("fair_weight", ""),
            maxlength=30,
            size=6,
            placeholder="1",
            ident="queue-weight",
        )
        + grid(flavors, spec_groups=(spec or {}).get("resource_groups"), data=data)
    )


def new_queue_form(csrf: str, cohorts: list[str], flavors: list[str], data: Any) -> str:
    values = data if data is not None else {}
    return form(
        "/console/queues/create",
        csrf,
        field(
            "name",
            "name",
            values.get("name", ""),
            required=True,
            maxlength=63,
            pattern=r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?",
            ident="queue-name",
        )
        + queue_fields(cohorts, flavors, data=data),
        button="Create queue",
        css="editor",
        test_id="create-queue",
    )


class QueuePages(PlatformPages):
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
        if session.platform_admin:
            body += await self._new_queue(request, session)
        return page(session, "Queues", body, here)

    async def _new_queue(
        self, request: Request[Any, Any, Any], session: Session, *, data: Any = None
    ) -> str:
        api = self.api(request, session)
        cohorts = await every_object(api, "cohorts")
        flavors = await every_object(api, "flavors")
        names = [
            [str(o.get("name")) for o in _items(a.body)] if a.ok else [] for a in (cohorts, flavors)
        ]
        return (
            '<h2 id="new-queue">New cluster queue</h2><div class="card">'
            + new_queue_form(session.csrf, names[0], names[1], data)
            + "</div>"
        )

    @post("/queues/create")
    async def create(self, request: Request[Any, Any, Any]) -> Response[Any]:
        """A new cluster queue; refused, its form again as typed with the API's reason."""
        session = await self.platform(request)
        if isinstance(session, Response):
            return session
        data = await request.form()
        try:
            spec = new_queue_spec(data)
        except FormError as err:
            return await self._create_again(request, session, str(err), data, 422)
        answer = await self.api(request, session).call(
            "POST", "/api/v1/admin/config/cluster-queues", json=spec
        )
        if not answer.ok:
            if answer.status == 401:
                return await self.failed(request, session, answer, "/console/queues")
            return await self._create_again(request, session, answer.error, data, answer.status)
        return await self.done(
            request,
            session,
            f"Queue {esc(spec['name'])} created.",
            f"/console/queues/{quote(spec['name'])}",
        )

    async def _create_again(
        self, request: Request[Any, Any, Any], session: Session, error: str, data: Any, status: int
    ) -> Response[Any]:
        body = (
            message("error", esc(error), test_id="form-error")
            + '<p class="muted"><a href="/console/queues">all queues</a></p>'
            + await self._new_queue(request, session, data=data)
        )
        return page(session, "New cluster queue", body, "/console/queues", status)

    async def _settings_form(
        self,
        request: Request[Any, Any, Any],
        session: Session,
        name: str,
        spec: dict[str, Any],
        version: object,
        data: Any,
    ) -> str:
        api = self.api(request, session)
        cohorts = await every_object(api, "cohorts")
        flavors = await every_object(api, "flavors")
        names = [
            [str(o.get("name")) for o in _items(a.body)] if a.ok else [] for a in (cohorts, flavors)
        ]
        edit = form(
            f"/console/queues/{quote(name)}/settings",
            session.csrf,
            version_field(version) + queue_fields(names[0], names[1], data=data, spec=spec),
            button="Save settings",
            css="editor",
            test_id="queue-settings",
        )
        return (
            '<details class="card" data-testid="queue-settings-box"'
            + (" open" if data is not None else "")
            + "><summary>Cohort, queueing, preemption and flavors</summary>"
            '<p class="muted">Move the queue to another cohort, change how it queues and'
            " preempts, or give it another flavor or resource (a new row); saved with the"
            " version this page was read at.</p>" + edit + "</details>"
        )

    @post("/queues/{name:str}/settings")
    async def settings(self, request: Request[Any, Any, Any], name: QueueName) -> Response[Any]:
        """The queue's cohort, queueing, preemption and flavors, saved with ``If-Match``."""
        session = await self.platform(request)
        if isinstance(session, Response):
            return session
        data = await request.form()
        api = self.api(request, session)
        config = await _config(api, name)
        if not config.ok:
            return await self.failed(request, session, config, "/console/queues")
        version = _version_in(data)
        try:
            if version is None:
                raise FormError("This form lost its version: reload.")
            spec = queue_spec(data, config.body["spec"])
        except FormError as err:
            return await self._detail(
                request, session, name, settings=data, error=str(err), status=422
            )
        return await self.change(
            request,
            session,
            "PUT",
            f"/api/v1/admin/config/cluster-queues/{name}",
            version,
            json=spec,
            again=lambda error, status: self._detail(
                request, session, name, settings=data, error=error, status=status
            ),
            afresh=showing_error(self._detail, request, session, name),
            stale=STALE,
            done=f"Saved queue {esc(name)}.",
            to=f"/console/queues/{quote(name)}",
        )

    @post("/queues/{name:str}/delete")
    async def delete(self, request: Request[Any, Any, Any], name: QueueName) -> Response[Any]:
        """Refused with the API's reason (409) while a tenant uses it or work is in it."""
        session = await self.platform(request)
        if isinstance(session, Response):
            return session
        data = await request.form()
        version = _version_in(data)
        if version is None:
            return await self._detail(
                request, session, name, error="This form lost its version: reload.", status=422
            )
        return await self.remove(
            request,
            session,
            f"/api/v1/admin/config/cluster-queues/{name}",
            version,
            again=showing_error(self._detail, request, session, name),
            stale=STALE,
            done=f"Queue {esc(name)} deleted.",
            to="/console/queues",
        )

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
            return await self._detail(
                request, session, name, error=f"{STALE} ({answer.error})", status=412
            )
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
        return await self.change(
            request,
            session,
            "PUT",
            f"/api/v1/admin/config/cluster-queues/{name}",
            version,
            json=spec,
            again=lambda error, status: self._detail(
                request, session, name, data=data, error=error, status=status
            ),
            afresh=showing_error(self._detail, request, session, name),
            stale=STALE,
            done=lambda saved: (
                f"Saved queue {esc(name)} (version {esc(saved.body.get('version'))})."
            ),
            to=f"/console/queues/{quote(name)}",
        )

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
        settings: Any = None,
    ) -> Response[Any]:
        """The queue's page; ``data``: its quota editor as typed, ``settings``: its
        settings form as typed (each refused, with ``error``)."""
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
        shown = form_error(error)
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
            version_field(version) + table(HEADERS, cells, test_id="quota"),
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
            + await self._settings_form(request, session, name, spec, version, settings)
            + "<h2>Delete</h2>"
            + form(
                f"{action}/delete",
                session.csrf,
                version_field(version),
                button="Delete queue",
                danger=True,
                test_id="delete-queue",
            )
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


STALE = (
    "Not saved: someone changed this queue since you opened it. The form now shows "
    "their version; make your change again if it still holds."
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
