"""The console's models: each with its endpoints and whether this gateway reaches them
(the API's active health checks), and forms to create, change and delete one.

A change goes through ``/api/v1/admin/models/{name}``: an edit names the version it was
read at in ``If-Match`` (412 when someone changed it meanwhile); a delete too, and the
API's 409 (a tenant's allow-list still names the model) is shown with its reason."""

from __future__ import annotations

import re
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from litestar import Request, Response, get, post
from litestar.params import QueryParameter

from gateway.console.api import Answer
from gateway.console.base import ConsolePages, FormError, form_text, page, redirect, showing_error
from gateway.console.html import (
    esc,
    field,
    form,
    form_error,
    message,
    object_page,
    table,
    textarea,
    version_field,
)
from gateway.console.sessions import Session
from tenants.model_checks import model_name_error

__all__ = ["ModelPages", "parse_endpoints", "show_endpoints"]

ModelName = Annotated[str, QueryParameter(min_length=1, max_length=256)]
MAX_ENDPOINTS = 32
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")
HELP = (
    "One endpoint a line: its OpenAI-compatible base URL, then optionally key=ENV_VAR "
    "(the variable holding its API key on each gateway) and weight=N."
)


def parse_endpoints(text: str) -> list[dict[str, Any]]:
    """The endpoints of the form's text; :class:`FormError` names the line at fault."""
    endpoints: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split()
        if not words:
            continue
        url, *options = words
        if not url.startswith(("http://", "https://")) or len(url) > 2048:
            raise FormError(f"endpoints, line {number}: start with an http(s):// base URL")
        endpoint: dict[str, Any] = {"base_url": url}
        for option in options:
            name, _, value = option.partition("=")
            if name == "key" and _ENV.match(value):
                endpoint["api_key_env"] = value
            elif name == "weight" and value.isdigit() and 1 <= int(value) <= 1000:
                endpoint["weight"] = int(value)
            else:
                raise FormError(
                    f"endpoints, line {number}: {option[:40]!r} is neither key=ENV_VAR "
                    "nor weight=1..1000"
                )
        endpoints.append(endpoint)
    if not endpoints:
        raise FormError("endpoints: at least one")
    if len(endpoints) > MAX_ENDPOINTS:
        raise FormError(f"endpoints: at most {MAX_ENDPOINTS}")
    return endpoints


def show_endpoints(endpoints: Any) -> str:
    """Endpoints back in the form's syntax."""
    lines = []
    for e in endpoints or []:
        if not isinstance(e, dict):
            continue
        words = [str(e.get("base_url", ""))]
        if e.get("api_key_env"):
            words.append(f"key={e['api_key_env']}")
        if e.get("weight", 1) != 1:
            words.append(f"weight={e['weight']}")
        lines.append(" ".join(words))
    return "\n".join(lines)


def _path(name: str) -> str:
    """The model's API path; :class:`FormError` for a name that is none (a ``..`` segment
    would make the path another route's)."""
    if model_name_error(name) is not None or any(s in ("", ".", "..") for s in name.split("/")):
        raise FormError(f"invalid model name {name[:130]!r}")
    return "/api/v1/admin/models/" + quote(name, safe="/")


def _edit_link(name: str) -> str:
    return "/console/models/edit?" + urlencode({"name": name})


class ModelPages(ConsolePages):
    @get("/models")
    async def models(self, request: Request[Any, Any, Any]) -> Response[Any]:
        session = await self.signed_in(request)
        here = "/console/models"
        answer = await self.api(request, session).get("/api/v1/admin/models")
        if not answer.ok:
            return await self.failed(request, session, answer, here)
        return self._list(session, answer)

    def _list(
        self, session: Session, answer: Answer, *, error: str = "", data: Any = None
    ) -> Response[Any]:
        rows = []
        for model in answer.body if isinstance(answer.body, list) else []:
            if not isinstance(model, dict):
                continue
            name = str(model.get("name"))
            endpoints = "".join(
                _endpoint(e) for e in model.get("endpoints") or [] if isinstance(e, dict)
            )
            rows.append(
                (
                    f'<a href="{esc(_edit_link(name))}">{esc(name)}</a>',
                    esc(model.get("flavor")),
                    "yes" if model.get("served") else '<span class="muted">no</span>',
                    endpoints,
                )
            )
        values = data if data is not None else {}
        create = form(
            "/console/models/create",
            session.csrf,
            field(
                "name",
                "name",
                values.get("name", ""),
                required=True,
                maxlength=256,
                placeholder="org/model",
            )
            + field(
                "flavor",
                "flavor",
                values.get("flavor", ""),
                required=True,
                maxlength=63,
                ident="new-flavor",
            )
            + textarea("endpoints", "endpoints", values.get("endpoints", ""), rows=3)
            + f'<p class="muted">{esc(HELP)}</p>',
            button="Create model",
            css="editor",
            test_id="create-model",
        )
        shown = form_error(error)
        body = (
            shown
            + table(["model", "flavor", "served", "endpoints and health"], rows, test_id="models")
            + f'<h2>New model</h2><div class="card">{create}</div>'
        )
        return page(session, "Models and endpoints", body, "/console/models", 422 if error else 200)

    @post("/models/create")
    async def create(self, request: Request[Any, Any, Any]) -> Response[Any]:
        session = await self.signed_in(request)
        data = await request.form()
        api = self.api(request, session)
        try:
            name = form_text(data, "name", max_length=256)
            path = _path(name)
            body = {
                "flavor": form_text(data, "flavor", max_length=63),
                "endpoints": parse_endpoints(form_text(data, "endpoints", max_length=65536)),
            }
        except FormError as err:
            return await self._again(request, session, str(err), data)
        # PUT without If-Match creates or replaces: a model of that name already there
        # is edited on its own page, with its version, never overwritten from here.
        existing = await api.get(path)
        if existing.ok:
            return await self._again(
                request, session, f"model {name!r} already exists: edit it on its page", data
            )
        if existing.status not in (404,):
            return await self._again(request, session, existing.error, data)
        answer = await api.call("PUT", path, json=body)
        if not answer.ok:
            return await self._again(request, session, answer.error, data)
        await self.flash(
            request, session, message("ok", f"Model {esc(name)} created.", test_id="saved")
        )
        return redirect("/console/models")

    async def _again(
        self, request: Request[Any, Any, Any], session: Session, error: str, data: Any
    ) -> Response[Any]:
        answer = await self.api(request, session).get("/api/v1/admin/models")
        if not answer.ok:
            return await self.failed(request, session, answer, "/console/models")
        return self._list(session, answer, error=error, data=data)

    @get("/models/edit")
    async def edit(self, request: Request[Any, Any, Any], name: ModelName) -> Response[Any]:
        session = await self.signed_in(request)
        return await self._edit_page(request, session, name)

    async def _edit_page(
        self,
        request: Request[Any, Any, Any],
        session: Session,
        name: str,
        *,
        error: str = "",
        data: Any = None,
        status: int = 200,
    ) -> Response[Any]:
        try:
            path = _path(name)
        except FormError as err:
            return await self.failed(
                request, session, Answer(400, _said(str(err))), "/console/models"
            )
        answer = await self.api(request, session).get(path)
        if not answer.ok:
            return await self.failed(request, session, answer, "/console/models")
        model = answer.body if isinstance(answer.body, dict) else {}
        version = model.get("version")
        values = (
            data
            if data is not None
            else {
                "flavor": model.get("flavor", ""),
                "endpoints": show_endpoints(model.get("endpoints")),
            }
        )
        hidden = f'<input type="hidden" name="name" value="{esc(name)}">' + version_field(version)
        edit = form(
            "/console/models/save",
            session.csrf,
            hidden
            + field("flavor", "flavor", values.get("flavor", ""), required=True, maxlength=63)
            + textarea("endpoints", "endpoints", values.get("endpoints", ""), rows=4)
            + f'<p class="muted">{esc(HELP)}</p>',
            button="Save",
            css="editor",
            test_id="edit-model",
        )
        remove = form(
            "/console/models/delete", session.csrf, hidden, button="Delete model", danger=True
        )
        about = (
            f'<p class="muted">version {esc(version)} · '
            '<a href="/console/models">all models</a></p>'
        )
        body = object_page(error, about, edit, remove)
        return page(session, f"Model {name}", body, "/console/models", status)

    @post("/models/save")
    async def save(self, request: Request[Any, Any, Any]) -> Response[Any]:
        session = await self.signed_in(request)
        data = await request.form()
        try:
            name = form_text(data, "name", max_length=256)
            path = _path(name)
            version = form_text(data, "version", max_length=18)
            body = {
                "flavor": form_text(data, "flavor", max_length=63),
                "endpoints": parse_endpoints(form_text(data, "endpoints", max_length=65536)),
            }
        except FormError as err:
            named = data.get("name")
            if not isinstance(named, str) or not named or len(named) > 256:
                return redirect("/console/models")
            return await self._edit_page(
                request, session, named, error=str(err), data=data, status=422
            )
        return await self.change(
            request,
            session,
            "PUT",
            path,
            version,
            json=body,
            again=lambda error, status: self._edit_page(
                request, session, name, error=error, data=data, status=status
            ),
            afresh=showing_error(self._edit_page, request, session, name),
            stale=STALE,
            done=lambda saved: (
                f"Model {esc(name)} saved (version {esc(saved.body.get('version'))})."
            ),
            to=_edit_link(name),
        )

    @post("/models/delete")
    async def delete(self, request: Request[Any, Any, Any]) -> Response[Any]:
        session = await self.signed_in(request)
        data = await request.form()
        try:
            name = form_text(data, "name", max_length=256)
            path = _path(name)
            version = form_text(data, "version", max_length=18)
        except FormError:
            return redirect("/console/models")
        return await self.remove(
            request,
            session,
            path,
            version,
            again=showing_error(self._edit_page, request, session, name),
            stale=STALE,
            done=f"Model {esc(name)} deleted.",
            to="/console/models",
        )


def _endpoint(e: dict[str, Any]) -> str:
    """One endpoint, with whether this gateway's health checks reach it."""
    health = (
        '<span class="health up" data-testid="health">healthy</span>'
        if e.get("healthy")
        else '<span class="health down" data-testid="health">unreachable</span>'
    )
    key = f' <span class="muted">key {esc(e["api_key_env"])}</span>' if e.get("api_key_env") else ""
    weight = e.get("weight", 1)
    heavier = f' <span class="muted">weight {esc(weight)}</span>' if weight != 1 else ""
    return f'<div data-testid="endpoint">{esc(e.get("base_url"))} {health}{key}{heavier}</div>'


def _said(text: str) -> dict[str, Any]:
    return {"error": {"code": "invalid_request", "message": text}}


STALE = (
    "Not saved: someone changed this model since you opened it; the form now shows their version."
)
