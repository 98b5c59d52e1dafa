"""Keys in the console, a tenant's and (for platform admins) the platform's: the list
(with each key's use, flags and own token limits), create (its token shown once,
optionally with limits), rotate, revoke, and set or lift a key's limits.

Limits go to the API as ``limits: {"tokens-per-minute": N, "tokens-per-day": N}`` (on
create, and ``PATCH /api/v1/admin/tenants/{tenant}/keys/{key_id}`` after); the console
checks the numbers first so a person reads which field is wrong, and the API checks
them again (and decides who may change which key: a tenant admin its member keys)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from litestar import Request, Response, get, post

from gateway.console.api import Answer
from gateway.console.base import ConsolePages, FormError, page, redirect
from gateway.console.html import esc, form, message, table
from gateway.console.pages import GRACES, TENANT_ADMIN, KeyId, TenantName, _activity, _when
from gateway.console.sessions import Session
from tenants.services.api_keys import MAX_KEY_LIMIT

__all__ = ["LIMITS", "KeyPages", "limits_of_form"]

LIMITS = (
    ("tokens-per-minute", "tokens_per_minute", "/ min"),
    ("tokens-per-day", "tokens_per_day", "/ day"),
)
"""Each limit a key may carry: its name in the API, its form field, its unit as shown."""

_WHOLE = re.compile(r"[0-9]{1,3}([,_ ]?[0-9]{3})*|[0-9]+")


def limits_of_form(data: Any, *, lift_empty: bool) -> dict[str, int | None]:
    """The limits a form asks for: a whole number of tokens (``20000``, ``20,000``),
    or, with ``lift_empty``, an empty field to lift that limit (on create an empty
    field is no limit, so it is left out); a field not sent at all is left as it is.
    Raises :class:`FormError` naming the field."""
    limits: dict[str, int | None] = {}
    for name, field_name, _ in LIMITS:
        raw = data.get(field_name)
        if raw is None:
            continue
        label = field_name.replace("_", " ")
        if not isinstance(raw, str) or len(raw) > 24:
            raise FormError(f"{label}: a whole number of tokens")
        text = raw.strip()
        if not text:
            if lift_empty:
                limits[name] = None
            continue
        if not _WHOLE.fullmatch(text):
            raise FormError(
                f"{label}: {text[:24]!r} is not a whole number of tokens (empty: no limit)"
            )
        value = int(re.sub(r"[,_ ]", "", text))
        if not 1 <= value <= MAX_KEY_LIMIT:
            raise FormError(f"{label}: from 1 to {MAX_KEY_LIMIT:,} tokens (empty: no limit)")
        limits[name] = value
    return limits


def _limit_inputs(key_id: str, limits: dict[str, Any]) -> str:
    """The two limit fields of one key's row (labelled for screen readers; the row has
    several forms, so no ids)."""
    return "".join(
        f'<span class="limit"><input name="{field_name}" type="number" min="1"'
        f' max="{MAX_KEY_LIMIT}" step="1" value="{esc(limits.get(name, ""))}" placeholder="none"'
        f' aria-label="{esc(field_name.replace("_", " "))} of key {esc(key_id)}"'
        f' data-testid="{field_name}-{esc(key_id)}"> {unit}</span>'
        for name, field_name, unit in LIMITS
    )


def _limits_shown(limits: Any) -> str:
    if not isinstance(limits, dict) or not limits:
        return '<span class="muted">none</span>'
    return "<br>".join(
        f"{int(limits[name]):,} tokens {unit}"
        for name, _, unit in LIMITS
        if isinstance(limits.get(name), int)
    )


def _may_limit(session: Session, key: dict[str, Any]) -> bool:
    """Whether the page offers to change this key's limits: who may revoke it may (a
    platform admin any live key; a tenant admin its tenant's member keys). The API
    decides again."""
    if key.get("revoked_at") is not None:
        return False
    return session.platform_admin or set(key.get("roles") or []) <= {"member"}


def _limits_cell(session: Session, base: str, key: dict[str, Any]) -> str:
    raw = key.get("limits")
    limits: dict[str, Any] = raw if isinstance(raw, dict) else {}
    shown = f'<span data-testid="limits">{_limits_shown(limits)}</span>'
    if not _may_limit(session, key):
        return shown
    key_id = str(key["key_id"])
    editor = form(
        f"{base}/{key_id}/limits",
        session.csrf,
        _limit_inputs(key_id, limits),
        button="Set limits",
        css="inline limits",
        test_id=f"limits-form-{key_id}",
    )
    return shown + editor


@dataclass(frozen=True)
class _Place:
    """Where keys live: a tenant's (``tenant``), or the platform's (``None``). The API
    and the console name a key's actions alike under their bases."""

    tenant: str | None

    @property
    def api(self) -> str:
        if self.tenant is None:
            return "/api/v1/admin/keys"
        return f"/api/v1/admin/tenants/{self.tenant}/keys"

    @property
    def page(self) -> str:
        return "/console/keys" if self.tenant is None else f"/console/tenants/{self.tenant}"

    @property
    def base(self) -> str:
        """Where the page's forms post (a key's actions under ``{base}/{key_id}/``)."""
        return "/console/keys" if self.tenant is None else f"{self.page}/keys"

    @property
    def back(self) -> str:
        """Where a refused call leaves the page."""
        return "/console/keys" if self.tenant is None else "/console/tenants"


_PLATFORM = _Place(None)


def _create_form(session: Session, place: _Place) -> str:
    if place.tenant is None:
        role = ""  # a platform key is an admin's: the API gives it the role
    else:
        roles = ["member"] if not session.platform_admin else ["member", TENANT_ADMIN]
        options = "".join(f'<option value="{r}">{r}</option>' for r in roles)
        role = f'<label for="role">role</label><select id="role" name="role">{options}</select>'
    limits = "".join(
        f'<label for="new-{field_name}">{esc(field_name.replace("_", " "))}</label>'
        f'<input id="new-{field_name}" name="{field_name}" type="number" min="1"'
        f' max="{MAX_KEY_LIMIT}" step="1" size="10" placeholder="no limit">'
        for _, field_name, _ in LIMITS
    )
    return form(
        place.base,
        session.csrf,
        '<label for="principal">principal</label>'
        '<input id="principal" name="principal" required maxlength="64"'
        ' pattern="[A-Za-z0-9][A-Za-z0-9._@-]*" placeholder="ci-bot">' + role + limits,
        button="Create key",
    )


def _actions(session: Session, place: _Place, key: dict[str, Any]) -> str:
    if key.get("revoked_at") is not None:
        why = key.get("revoked_reason")
        return '<span class="muted">revoked</span>' + (
            f'<div class="muted">{esc(why)}</div>' if why else ""
        )
    key_base = f"{place.base}/{key['key_id']}"
    return form(
        f"{key_base}/rotate",
        session.csrf,
        '<select name="grace_seconds" aria-label="old secret works for">'
        + "".join(f'<option value="{v}">{esc(n)}</option>' for n, v in GRACES)
        + "</select>",
        button="Rotate",
    ) + form(f"{key_base}/revoke", session.csrf, "", button="Revoke", danger=True)


def _keys_body(session: Session, place: _Place, keys: list[dict[str, Any]]) -> str:
    rows = [
        (
            f"<code>{esc(key['key_id'])}</code>",
            esc(key["principal"]),
            esc(", ".join(key["roles"])),
            esc(" ".join(key["scopes"])),
            _when(key.get("created_at")),
            _when(key.get("last_used_at")),
            _activity(key.get("activity")),
            _limits_cell(session, place.base, key),
            _when(key.get("expires_at")),
            _actions(session, place, key),
        )
        for key in keys
    ]
    headers = [
        "key",
        "principal",
        "roles",
        "scopes",
        "created",
        "last used",
        "use",
        "own token limits",
        "expires",
        "",
    ]
    whose = (
        "A platform key belongs to no tenant and carries the admin role: it can do"
        " everything a platform admin can. Give one per person or automation, so each"
        " can be revoked alone."
        if place.tenant is None
        else "A key's own token limits (optional) sit below its queue's: a runaway key"
        " drains at most its own allowance, refused with <code>key_limit_exceeded</code>."
    )
    return (
        f"<h2>Keys</h2>{table(headers, rows, test_id='keys')}"
        f'<h2>New key</h2><div class="card">{_create_form(session, place)}'
        f'<p class="muted">{whose}</p></div>'
    )


class KeyPages(ConsolePages):
    """A tenant's keys (``/console/tenants/{tenant}``) and the platform's
    (``/console/keys``, platform admins): the same page and actions on either."""

    @get("/tenants/{tenant:str}")
    async def tenant(self, request: Request[Any, Any, Any], tenant: TenantName) -> Response[Any]:
        session = await self.signed_in(request)
        here = "/console/tenants" if session.platform_admin else f"/console/tenants/{tenant}"
        return await self._keys_page(request, session, _Place(tenant), f"Tenant {tenant}", here)

    @get("/keys")
    async def platform(self, request: Request[Any, Any, Any]) -> Response[Any]:
        session = await self.signed_in(request)
        return await self._keys_page(request, session, _PLATFORM, "Platform keys", "/console/keys")

    async def _keys_page(
        self,
        request: Request[Any, Any, Any],
        session: Session,
        place: _Place,
        title: str,
        here: str,
    ) -> Response[Any]:
        answer = await self.api(request, session).get(place.api)
        if not answer.ok:
            return await self.failed(request, session, answer, here)
        return page(session, title, _keys_body(session, place, answer.body), here)

    @post("/tenants/{tenant:str}/keys")
    async def create_key(
        self, request: Request[Any, Any, Any], tenant: TenantName
    ) -> Response[Any]:
        return await self._create(request, _Place(tenant))

    @post("/keys")
    async def create_platform_key(self, request: Request[Any, Any, Any]) -> Response[Any]:
        return await self._create(request, _PLATFORM)

    async def _create(self, request: Request[Any, Any, Any], place: _Place) -> Response[Any]:
        session = await self.signed_in(request)
        data = await request.form()
        principal, role = data.get("principal"), data.get("role") or "member"
        if not isinstance(principal, str) or not isinstance(role, str):
            return await self.failed(request, session, Answer(400, None), place.back)
        try:
            limits = limits_of_form(data, lift_empty=False)
        except FormError as err:
            return await self.refuse(request, session, f"Key not created: {esc(err)}", place.page)
        body: dict[str, Any] = {"principal": principal.strip()}
        if place.tenant is not None:
            body["roles"] = [role]
        if limits:
            body["limits"] = limits
        answer = await self.api(request, session).call("POST", place.api, json=body)
        if not answer.ok:
            return await self.failed(request, session, answer, place.back)
        await self.flash(
            request,
            session,
            message(
                "token",
                f"New key <code>{esc(answer.body['key_id'])}</code> for {esc(principal)}: copy its "
                "token now, it is shown this once."
                f'<pre data-testid="new-token">{esc(answer.body["token"])}</pre>',
                test_id="new-key",
            ),
        )
        return redirect(place.page)

    @post("/tenants/{tenant:str}/keys/{key_id:str}/limits")
    async def set_limits(
        self, request: Request[Any, Any, Any], tenant: TenantName, key_id: KeyId
    ) -> Response[Any]:
        return await self._set_limits(request, _Place(tenant), key_id)

    @post("/keys/{key_id:str}/limits")
    async def set_platform_limits(
        self, request: Request[Any, Any, Any], key_id: KeyId
    ) -> Response[Any]:
        return await self._set_limits(request, _PLATFORM, key_id)

    async def _set_limits(
        self, request: Request[Any, Any, Any], place: _Place, key_id: str
    ) -> Response[Any]:
        """Set (a number) or lift (empty) a key's own token limits; a refusal, the
        console's or the API's, is shown above the keys with which field and why."""
        session = await self.signed_in(request)
        here = place.page
        try:
            limits = limits_of_form(await request.form(), lift_empty=True)
            if not limits:
                raise FormError("give tokens per minute or tokens per day (empty: no limit)")
        except FormError as err:
            return await self.refuse(
                request,
                session,
                f"Limits of <code>{esc(key_id)}</code> not changed: {esc(err)}",
                here,
            )
        answer = await self.api(request, session).call(
            "PATCH", f"{place.api}/{key_id}", json={"limits": limits}
        )
        if not answer.ok:
            if answer.status in (401, 403, 404):  # signed out, or not this key's to change
                return await self.failed(request, session, answer, here)
            why = esc(answer.error)
            return await self.refuse(
                request, session, f"Limits of <code>{esc(key_id)}</code> not changed: {why}", here
            )
        now = answer.body.get("limits") if isinstance(answer.body, dict) else None
        await self.flash(
            request,
            session,
            message(
                "ok",
                f"Limits of key <code>{esc(key_id)}</code>: "
                + _limits_shown(now).replace("<br>", ", "),
                test_id="saved",
            ),
        )
        return redirect(here)

    @post("/tenants/{tenant:str}/keys/{key_id:str}/revoke")
    async def revoke_key(
        self, request: Request[Any, Any, Any], tenant: TenantName, key_id: KeyId
    ) -> Response[Any]:
        return await self._revoke(request, _Place(tenant), key_id)

    @post("/keys/{key_id:str}/revoke")
    async def revoke_platform_key(
        self, request: Request[Any, Any, Any], key_id: KeyId
    ) -> Response[Any]:
        return await self._revoke(request, _PLATFORM, key_id)

    async def _revoke(
        self, request: Request[Any, Any, Any], place: _Place, key_id: str
    ) -> Response[Any]:
        session = await self.signed_in(request)
        answer = await self.api(request, session).call("DELETE", f"{place.api}/{key_id}")
        if not answer.ok:
            return await self.failed(request, session, answer, place.back)
        await self.flash(
            request, session, message("ok", f"Key <code>{esc(key_id)}</code> revoked.")
        )
        return redirect(place.page)

    @post("/tenants/{tenant:str}/keys/{key_id:str}/rotate")
    async def rotate_key(
        self, request: Request[Any, Any, Any], tenant: TenantName, key_id: KeyId
    ) -> Response[Any]:
        return await self._rotate(request, _Place(tenant), key_id)

    @post("/keys/{key_id:str}/rotate")
    async def rotate_platform_key(
        self, request: Request[Any, Any, Any], key_id: KeyId
    ) -> Response[Any]:
        return await self._rotate(request, _PLATFORM, key_id)

    async def _rotate(
        self, request: Request[Any, Any, Any], place: _Place, key_id: str
    ) -> Response[Any]:
        session = await self.signed_in(request)
        grace = (await request.form()).get("grace_seconds", "3600")
        if not isinstance(grace, str) or not grace.isdigit() or len(grace) > 7:
            return await self.failed(request, session, Answer(400, None), place.back)
        answer = await self.api(request, session).call(
            "POST", f"{place.api}/{key_id}/rotate", json={"grace_seconds": int(grace)}
        )
        if not answer.ok:
            return await self.failed(request, session, answer, place.back)
        until = answer.body.get("previous_valid_until")
        await self.flash(
            request,
            session,
            message(
                "token",
                f"Key <code>{esc(key_id)}</code> rotated: copy its new token now, it is shown this "
                "once. "
                + (
                    f"The old one works until {_when(until)}."
                    if until
                    else "The old one is refused."
                )
                + f'<pre data-testid="new-token">{esc(answer.body["token"])}</pre>',
                test_id="new-key",
            ),
        )
        return redirect(place.page)
