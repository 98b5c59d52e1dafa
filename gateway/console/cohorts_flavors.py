"""The console's flavors and cohorts (platform admins): each listed, created, edited and
deleted through ``/api/v1/admin/config/{flavors,cohorts}``.

A flavor names the backend its admitted work runs on (none: the gateway's own
``local``). A cohort names its parent (none: a root), its own quotas per flavor and
resource (the grid of :mod:`gateway.console.quota_grid`) and its fair-sharing weight.
An edit or a delete names the version read (``If-Match``): 412 when someone changed it
since; a delete the API refuses with 409 (a queue has quota for the flavor, a cohort
has children or queues) is shown with its reason. The cohorts' list and create form
sit under the live tree on ``/console/cohorts`` (:func:`cohort_section`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import quote

from litestar import Request, Response, get, post
from litestar.params import Parameter

from gateway.console.api import Answer, ConsoleApi
from gateway.console.base import FormError, form_text, page, showing_error
from gateway.console.html import (
    esc,
    field,
    form,
    form_error,
    message,
    object_page,
    select,
    table,
    version_field,
)
from gateway.console.pages import _items, _number
from gateway.console.quota_grid import (
    PlatformPages,
    every_object,
    grid,
    groups_from_form,
    summary,
    version_of,
)
from gateway.console.sessions import Session

__all__ = ["CohortPages", "FlavorPages", "cohort_section"]

NAME = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
ObjectName = Annotated[str, Parameter(pattern=NAME)]
LOCAL = "local"


async def _names(api: ConsoleApi, kind: str) -> list[str]:
    answer = await every_object(api, kind)
    return [str(o.get("name")) for o in _items(answer.body)] if answer.ok else []


class _ObjectPages(PlatformPages):
    """Saving and deleting one object of ``/api/v1/admin/config/{collection}`` from its
    page: the version read goes in ``If-Match``, and the answer is shown by
    :meth:`change` on the object's page (``_edit``, which each kind draws)."""

    kind = ""  # "flavor"
    collection = ""  # "flavors": the API's and the console's path

    async def _edit(
        self,
        request: Request[Any, Any, Any],
        session: Session,
        name: str,
        *,
        error: str = "",
        data: Any = None,
        status: int = 200,
    ) -> Response[Any]:
        raise NotImplementedError

    async def _show(self, request: Request[Any, Any, Any], name: str) -> Response[Any]:
        session = await self.platform(request)
        if isinstance(session, Response):
            return session
        return await self._edit(request, session, name)

    async def _save(
        self, request: Request[Any, Any, Any], name: str, spec_of: Callable[[Any], dict[str, Any]]
    ) -> Response[Any]:
        session = await self.platform(request)
        if isinstance(session, Response):
            return session
        data = await request.form()
        try:
            version = version_of(data)
            spec = spec_of(data)
        except FormError as err:
            return await self._edit(request, session, name, error=str(err), data=data, status=422)
        return await self.change(
            request,
            session,
            "PUT",
            f"/api/v1/admin/config/{self.collection}/{name}",
            version,
            json=spec,
            again=lambda error, status: self._edit(
                request, session, name, error=error, data=data, status=status
            ),
            afresh=showing_error(self._edit, request, session, name),
            stale=_stale(self.kind),
            done=f"{self.kind.capitalize()} {esc(name)} saved.",
            to=f"/console/{self.collection}/{quote(name)}",
        )

    async def _delete(self, request: Request[Any, Any, Any], name: str) -> Response[Any]:
        session = await self.platform(request)
        if isinstance(session, Response):
            return session
        data = await request.form()
        try:
            version = version_of(data)
        except FormError as err:
            return await self._edit(request, session, name, error=str(err), status=422)
        return await self.remove(
            request,
            session,
            f"/api/v1/admin/config/{self.collection}/{name}",
            version,
            again=showing_error(self._edit, request, session, name),
            stale=_stale(self.kind),
            done=f"{self.kind.capitalize()} {esc(name)} deleted.",
            to=f"/console/{self.collection}",
        )


# --- flavors ---------------------------------------------------------------------------


class FlavorPages(_ObjectPages):
    kind = "flavor"
    collection = "flavors"

    @get("/flavors")
    async def flavors(self, request: Request[Any, Any, Any]) -> Response[Any]:
        session = await self.platform(request)
        if isinstance(session, Response):
            return session
        return await self._list(request, session)

    async def _list(
        self,
        request: Request[Any, Any, Any],
        session: Session,
        *,
        error: str = "",
        data: Any = None,
        status: int = 200,
    ) -> Response[Any]:
        here = "/console/flavors"
        api = self.api(request, session)
        answer = await every_object(api, "flavors")
        if not answer.ok:
            return await self.failed(request, session, answer, here)
        backends = [LOCAL, *await _names(api, "backends")]
        rows = [
            (
                f'<a href="/console/flavors/{quote(str(f.get("name")))}">{esc(f.get("name"))}</a>',
                esc((f.get("spec") or {}).get("backend") or LOCAL),
                esc(f.get("version")),
            )
            for f in _items(answer.body)
        ]
        values = data if data is not None else {}
        create = form(
            f"{here}/create",
            session.csrf,
            field(
                "name",
                "name",
                values.get("name", ""),
                required=True,
                maxlength=63,
                pattern=NAME[1:-1],
                ident="flavor-name",
            )
            + select("backend", "backend", backends, str(values.get("backend", LOCAL))),
            button="Create flavor",
            css="editor",
            test_id="create-flavor",
        )
        shown = form_error(error)
        body = (
            shown
            + table(["flavor", "backend it runs on", "version"], rows, test_id="flavors")
            + f'<h2>New flavor</h2><div class="card">{create}</div>'
        )
        return page(session, "Flavors", body, here, status)

    @post("/flavors/create")
    async def create(self, request: Request[Any, Any, Any]) -> Response[Any]:
        session = await self.platform(request)
        if isinstance(session, Response):
            return session
        data = await request.form()
        try:
            name = form_text(data, "name", max_length=63)
            backend = form_text(data, "backend", max_length=63, required=False) or LOCAL
        except FormError as err:
            return await self._list(request, session, error=str(err), data=data, status=422)
        body: dict[str, Any] = {"name": name}
        if backend != LOCAL:
            body["backend"] = backend
        answer = await self.api(request, session).call(
            "POST", "/api/v1/admin/config/flavors", json=body
        )
        if not answer.ok:
            return await self._list(
                request, session, error=answer.error, data=data, status=answer.status
            )
        return await self.done(request, session, f"Flavor {esc(name)} created.", "/console/flavors")

    @get("/flavors/{name:str}")
    async def flavor(self, request: Request[Any, Any, Any], name: ObjectName) -> Response[Any]:
        return await self._show(request, name)

    async def _edit(
        self,
        request: Request[Any, Any, Any],
        session: Session,
        name: str,
        *,
        error: str = "",
        data: Any = None,
        status: int = 200,
    ) -> Response[Any]:
        api = self.api(request, session)
        answer = await api.get(f"/api/v1/admin/config/flavors/{name}")
        if not answer.ok:
            return await self.failed(request, session, answer, "/console/flavors")
        spec = answer.body.get("spec") or {}
        version = answer.body.get("version")
        chosen = data.get("backend") if data is not None else spec.get("backend")
        backends = [LOCAL, *await _names(api, "backends")]
        base = f"/console/flavors/{quote(name)}"
        edit = form(
            f"{base}/save",
            session.csrf,
            version_field(version) + select("backend", "backend", backends, str(chosen or LOCAL)),
            button="Save",
            css="editor",
            test_id="edit-flavor",
        )
        remove = form(
            f"{base}/delete",
            session.csrf,
            version_field(version),
            button="Delete flavor",
            danger=True,
        )
        about = (
            f'<p class="muted">version {esc(version)} · '
            '<a href="/console/flavors">all flavors</a></p>'
        )
        body = object_page(error, about, edit, remove)
        return page(session, f"Flavor {name}", body, "/console/flavors", status)

    @post("/flavors/{name:str}/save")
    async def save(self, request: Request[Any, Any, Any], name: ObjectName) -> Response[Any]:
        return await self._save(request, name, _flavor_spec)

    @post("/flavors/{name:str}/delete")
    async def delete(self, request: Request[Any, Any, Any], name: ObjectName) -> Response[Any]:
        return await self._delete(request, name)


def _flavor_spec(data: Any) -> dict[str, Any]:
    backend = form_text(data, "backend", max_length=63, required=False) or LOCAL
    return {"backend": backend} if backend != LOCAL else {}


# --- cohorts ---------------------------------------------------------------------------


def _cohort_fields(
    parents: list[str], flavors: list[str], *, spec: dict[str, Any], data: Any, ident: str
) -> str:
    parent = data.get("parent") if data is not None else spec.get("parent")
    weight = data.get("fair_weight") if data is not None else _number(spec.get("fair_weight"))
    return (
        select("parent", "parent", ["", *parents], str(parent or ""), empty="(none: a root)")
        + field(
            "fair_weight",
            "fair-sharing weight",
            weight or "",
            maxlength=30,
            placeholder="1",
            size=6,
            ident=f"{ident}-weight",
        )
        + grid(flavors, spec_groups=spec.get("resource_groups"), data=data)
    )


def _cohort_spec(data: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"resource_groups": groups_from_form(data)}
    parent = form_text(data, "parent", max_length=63, required=False)
    if parent:
        spec["parent"] = parent
    weight = form_text(data, "fair_weight", max_length=30, required=False)
    if weight:
        spec["fair_weight"] = int(weight) if weight.isdigit() else weight
    return spec


async def cohort_section(
    api: ConsoleApi, session: Session, *, error: str = "", data: Any = None
) -> str:
    """The configured cohorts (each linked to its editor) and the form of a new one: the
    part of ``/console/cohorts`` under the live tree."""
    answer = await every_object(api, "cohorts")
    if not answer.ok:
        return message("error", esc(answer.error), test_id="api-error")
    cohorts = _items(answer.body)
    names = [str(c.get("name")) for c in cohorts]
    flavors = await _names(api, "flavors")
    rows = [
        (
            f'<a href="/console/cohorts/{quote(str(c.get("name")))}">{esc(c.get("name"))}</a>',
            esc((c.get("spec") or {}).get("parent") or ""),
            summary((c.get("spec") or {}).get("resource_groups")),
            esc(_number((c.get("spec") or {}).get("fair_weight")) or "1"),
        )
        for c in cohorts
    ]
    values = data if data is not None else {}
    create = form(
        "/console/cohorts/create",
        session.csrf,
        field(
            "name",
            "name",
            values.get("name", ""),
            required=True,
            maxlength=63,
            pattern=NAME[1:-1],
            ident="cohort-name",
        )
        + _cohort_fields(names, flavors, spec={}, data=data, ident="new-cohort"),
        button="Create cohort",
        css="editor",
        test_id="create-cohort",
    )
    shown = form_error(error)
    return (
        '<h2 id="configured">Configured cohorts</h2>'
        + table(
            ["cohort", "parent", "its own quotas", "fair-sharing weight"],
            rows,
            test_id="cohorts",
        )
        + f'<h2 id="new-cohort">New cohort</h2>{shown}<div class="card">{create}</div>'
    )


class CohortPages(_ObjectPages):
    kind = "cohort"
    collection = "cohorts"

    @post("/cohorts/create")
    async def create(self, request: Request[Any, Any, Any]) -> Response[Any]:
        session = await self.platform(request)
        if isinstance(session, Response):
            return session
        data = await request.form()
        api = self.api(request, session)
        try:
            name = form_text(data, "name", max_length=63)
            spec = _cohort_spec(data)
        except FormError as err:
            return await self._again(request, session, str(err), data, 422)
        answer = await api.call("POST", "/api/v1/admin/config/cohorts", json={"name": name, **spec})
        if not answer.ok:
            return await self._again(request, session, answer.error, data, answer.status)
        return await self.done(
            request, session, f"Cohort {esc(name)} created.", f"/console/cohorts/{quote(name)}"
        )

    async def _again(
        self, request: Request[Any, Any, Any], session: Session, error: str, data: Any, status: int
    ) -> Response[Any]:
        """The new cohort's form as typed, with why it was refused."""
        if status == 401:
            return await self.failed(request, session, _answer(401, error), "/console/cohorts")
        section = await cohort_section(self.api(request, session), session, error=error, data=data)
        body = '<p class="muted"><a href="/console/cohorts">the cohort tree</a></p>' + section
        return page(session, "Cohorts", body, "/console/cohorts", status)

    @get("/cohorts/{name:str}")
    async def cohort(self, request: Request[Any, Any, Any], name: ObjectName) -> Response[Any]:
        return await self._show(request, name)

    async def _edit(
        self,
        request: Request[Any, Any, Any],
        session: Session,
        name: str,
        *,
        error: str = "",
        data: Any = None,
        status: int = 200,
    ) -> Response[Any]:
        api = self.api(request, session)
        answer = await api.get(f"/api/v1/admin/config/cohorts/{name}")
        if not answer.ok:
            return await self.failed(request, session, answer, "/console/cohorts")
        spec = answer.body.get("spec") or {}
        version = answer.body.get("version")
        parents = [n for n in await _names(api, "cohorts") if n != name]
        flavors = await _names(api, "flavors")
        base = f"/console/cohorts/{quote(name)}"
        edit = form(
            f"{base}/save",
            session.csrf,
            version_field(version)
            + _cohort_fields(parents, flavors, spec=spec, data=data, ident="edit-cohort"),
            button="Save",
            css="editor",
            test_id="edit-cohort",
        )
        remove = form(
            f"{base}/delete",
            session.csrf,
            version_field(version),
            button="Delete cohort",
            danger=True,
        )
        about = (
            f'<p class="muted">version {esc(version)} · '
            f'<a href="/console/queues?cohort={quote(name)}">its queues</a> · '
            '<a href="/console/cohorts">the cohort tree</a></p>'
            '<p class="muted">The fair-sharing weight counts only while fair sharing is on'
            ' (<a href="/console/settings">settings</a>).</p>'
        )
        body = object_page(error, about, edit, remove)
        return page(session, f"Cohort {name}", body, "/console/cohorts", status)

    @post("/cohorts/{name:str}/save")
    async def save(self, request: Request[Any, Any, Any], name: ObjectName) -> Response[Any]:
        return await self._save(request, name, _cohort_spec)

    @post("/cohorts/{name:str}/delete")
    async def delete(self, request: Request[Any, Any, Any], name: ObjectName) -> Response[Any]:
        return await self._delete(request, name)


def _answer(status: int, error: str) -> Answer:
    return Answer(status, {"error": {"code": "refused", "message": error}})


def _stale(what: str) -> str:
    return (
        f"Not saved: someone changed this {what} since you opened it; the form now shows"
        " their version"
    )
