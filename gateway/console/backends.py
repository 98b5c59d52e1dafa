"""The console's backends: each with its kind and the flavors that run on it, and forms
to create, change and delete one through ``/api/v1/admin/config/backends``.

A backend's settings differ by kind (Slurm, Kubernetes, Ray), so the form takes them as
the JSON the config file's entry holds; the API checks every field and names the one at
fault. An edit or delete names the version read (``If-Match``): 412 when stale; a delete
the API refuses with 409 (a flavor still runs on it) is shown with its reason."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Annotated, Any
from urllib.parse import quote

from litestar import Request, Response, get, post
from litestar.params import Parameter

from gateway.console.api import ConsoleApi
from gateway.console.base import ConsolePages, FormError, form_text, page, redirect, showing_error
from gateway.console.html import (
    esc,
    field,
    form,
    form_error,
    message,
    object_page,
    select,
    table,
    textarea,
    version_field,
)
from gateway.console.pages import _items
from gateway.console.sessions import Session

__all__ = ["BackendPages", "spec_from_form"]

NAME = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
BackendName = Annotated[str, Parameter(pattern=NAME)]
KINDS = ("slurm", "kubernetes", "ray")  # "local" is always there, and not configured
MAX_SPEC = 64 * 1024
FLAVOR_PAGES = 20  # of 500 flavors each: far more than any real deployment holds
EXAMPLE = '{"url": "https://slurm.example:6820", "token_env": "SLURM_JWT"}'


def spec_from_form(data: Any) -> dict[str, Any]:
    """The backend's settings of the form: kind, and a JSON object of the rest."""
    kind = form_text(data, "kind", max_length=20)
    if kind not in KINDS:
        raise FormError(f"kind: one of {', '.join(KINDS)}")
    text = form_text(data, "settings", max_length=MAX_SPEC, required=False) or "{}"
    try:
        settings = json.loads(text)
    except ValueError as err:
        raise FormError(f"settings: not JSON ({err})") from None
    if not isinstance(settings, dict):
        raise FormError('settings: a JSON object, as {"url": ...}')
    settings.pop("name", None)
    settings.pop("kind", None)
    return {"kind": kind, **settings}


async def _flavors_by_backend(api: ConsoleApi) -> dict[str, list[str]]:
    served: dict[str, list[str]] = defaultdict(list)
    cursor: str | None = None
    for _ in range(FLAVOR_PAGES):
        params = {"limit": "500", **({"cursor": cursor} if cursor else {})}
        answer = await api.get("/api/v1/admin/config/flavors", **params)
        if not answer.ok:
            break
        for flavor in _items(answer.body):
            spec = flavor.get("spec") or {}
            served[str(spec.get("backend") or "local")].append(str(flavor.get("name")))
        cursor = answer.body.get("next_cursor")
        if not cursor:
            break
    return served


class BackendPages(ConsolePages):
    @get("/backends")
    async def backends(self, request: Request[Any, Any, Any]) -> Response[Any]:
        session = await self.signed_in(request)
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
        here = "/console/backends"
        api = self.api(request, session)
        answer = await api.get("/api/v1/admin/config/backends", limit="500")
        if not answer.ok:
            return await self.failed(request, session, answer, here)
        served = await _flavors_by_backend(api)
        rows = [
            (
                '<span class="muted">local</span>',
                "local",
                esc(", ".join(served.get("local", []))),
                "the gateway's own sandboxed processes",
            )
        ]
        for backend in _items(answer.body):
            name = str(backend.get("name"))
            spec = backend.get("spec") or {}
            where = spec.get("url") or spec.get("namespace") or ""
            rows.append(
                (
                    f'<a href="/console/backends/{quote(name)}">{esc(name)}</a>',
                    esc(spec.get("kind")),
                    esc(", ".join(served.get(name, []))),
                    esc(where),
                )
            )
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
            )
            + select("kind", "kind", KINDS, str(values.get("kind", "slurm")))
            + textarea("settings", "settings (JSON)", values.get("settings", EXAMPLE), rows=4),
            button="Create backend",
            css="editor",
            test_id="create-backend",
        )
        shown = form_error(error)
        body = (
            shown
            + table(["backend", "kind", "flavors it runs", "where"], rows, test_id="backends")
            + '<p class="muted">Reachability is not reported by the API yet; a backend that'
            " cannot be reached leaves its workloads waiting, with the reason on each.</p>"
            + f'<h2>New backend</h2><div class="card">{create}</div>'
        )
        return page(session, "Backends", body, here, status)

    @post("/backends/create")
    async def create(self, request: Request[Any, Any, Any]) -> Response[Any]:
        session = await self.signed_in(request)
        data = await request.form()
        try:
            name = form_text(data, "name", max_length=63)
            spec = spec_from_form(data)
        except FormError as err:
            return await self._list(request, session, error=str(err), data=data, status=422)
        answer = await self.api(request, session).call(
            "POST", "/api/v1/admin/config/backends", json={"name": name, **spec}
        )
        if not answer.ok:
            return await self._list(
                request, session, error=answer.error, data=data, status=answer.status
            )
        await self.flash(
            request, session, message("ok", f"Backend {esc(name)} created.", test_id="saved")
        )
        return redirect(f"/console/backends/{quote(name)}")

    @get("/backends/{name:str}")
    async def backend(self, request: Request[Any, Any, Any], name: BackendName) -> Response[Any]:
        session = await self.signed_in(request)
        return await self._edit(request, session, name)

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
        answer = await api.get(f"/api/v1/admin/config/backends/{name}")
        if not answer.ok:
            return await self.failed(request, session, answer, "/console/backends")
        spec = dict(answer.body.get("spec") or {})
        version = answer.body.get("version")
        kind = str(spec.pop("kind", ""))
        spec.pop("name", None)
        values = (
            data
            if data is not None
            else {
                "kind": kind,
                "settings": json.dumps(spec, indent=2, sort_keys=True),
            }
        )
        served = (await _flavors_by_backend(api)).get(name, [])
        hidden = version_field(version)
        base = f"/console/backends/{quote(name)}"
        edit = form(
            f"{base}/save",
            session.csrf,
            hidden
            + select("kind", "kind", KINDS, str(values.get("kind", kind)))
            + textarea("settings", "settings (JSON)", str(values.get("settings", "")), rows=10),
            button="Save",
            css="editor",
            test_id="edit-backend",
        )
        remove = form(f"{base}/delete", session.csrf, hidden, button="Delete backend", danger=True)
        about = (
            f'<p class="muted">version {esc(version)} · flavors it runs: '
            f"{esc(', '.join(served) or 'none')} · "
            '<a href="/console/backends">all backends</a></p>'
        )
        body = object_page(error, about, edit, remove)
        return page(session, f"Backend {name}", body, "/console/backends", status)

    @post("/backends/{name:str}/save")
    async def save(self, request: Request[Any, Any, Any], name: BackendName) -> Response[Any]:
        session = await self.signed_in(request)
        data = await request.form()
        try:
            version = form_text(data, "version", max_length=18)
            spec = spec_from_form(data)
        except FormError as err:
            return await self._edit(request, session, name, error=str(err), data=data, status=422)
        return await self.change(
            request,
            session,
            "PUT",
            f"/api/v1/admin/config/backends/{name}",
            version,
            json=spec,
            again=lambda error, status: self._edit(
                request, session, name, error=error, data=data, status=status
            ),
            afresh=showing_error(self._edit, request, session, name),
            stale=STALE,
            done=f"Backend {esc(name)} saved.",
            to=f"/console/backends/{quote(name)}",
        )

    @post("/backends/{name:str}/delete")
    async def delete(self, request: Request[Any, Any, Any], name: BackendName) -> Response[Any]:
        session = await self.signed_in(request)
        data = await request.form()
        try:
            version = form_text(data, "version", max_length=18)
        except FormError as err:
            return await self._edit(request, session, name, error=str(err), status=422)
        return await self.remove(
            request,
            session,
            f"/api/v1/admin/config/backends/{name}",
            version,
            again=showing_error(self._edit, request, session, name),
            stale=STALE,
            done=f"Backend {esc(name)} deleted.",
            to="/console/backends",
        )


STALE = (
    "Not saved: the backends changed since you opened this page; it now shows the current settings."
)
