"""Creating and deleting tenants from the console's tenants page.

A new tenant gets its name, display name and queues (``POST /api/v1/admin/tenants``),
and optionally its first key (a tenant admin's, say, with its own token limits if
given), its token shown once. A delete is confirmed by typing the tenant's name (the
page works without script) and goes to ``DELETE /api/v1/admin/tenants/{name}``; its 409
(admitted or running workloads) is shown with the API's reason."""

from __future__ import annotations

import re
from typing import Annotated, Any

from litestar import Request, Response, post
from litestar.params import Parameter

from gateway.console.api import Answer
from gateway.console.base import ConsolePages, FormError, form_text, redirect
from gateway.console.html import esc, message
from gateway.console.keys import limits_of_form
from gateway.console.tenant_forms import NAME, ROLES

__all__ = ["TenantPages"]

_NAME = re.compile(f"^{NAME}$")
TenantName = Annotated[str, Parameter(pattern=f"^{NAME}$")]
MAX_QUEUES = 100


def _queues(text: str) -> list[str]:
    queues = [q.strip() for q in re.split(r"[,\s]+", text) if q.strip()]
    if len(queues) > MAX_QUEUES:
        raise FormError(f"queues: at most {MAX_QUEUES}")
    for queue in queues:
        if not _NAME.match(queue):
            raise FormError(f"queues: {queue[:70]!r} is not a queue name")
    return list(dict.fromkeys(queues))


class TenantPages(ConsolePages):
    @post("/tenant-create")
    async def create(self, request: Request[Any, Any, Any]) -> Response[Any]:
        session = await self.signed_in(request)
        here = "/console/tenants"
        data = await request.form()
        try:
            name = form_text(data, "name", max_length=63)
            if not _NAME.match(name):
                raise FormError("name: lower-case letters, digits and '-', at most 63")
            body = {
                "name": name,
                "display_name": form_text(data, "display_name", required=False),
                "queues": _queues(form_text(data, "queues", max_length=4096, required=False)),
            }
            principal = form_text(data, "principal", max_length=64, required=False)
            role = form_text(data, "role", max_length=20, required=False)
            if role not in ROLES or bool(principal) != bool(role):
                raise FormError("first key: give both its principal and its role, or neither")
            # Checked before the tenant is made: a wrong number must not leave a tenant
            # without the key that was asked for.
            limits = limits_of_form(data, lift_empty=False)
            if limits and not principal:
                raise FormError("first key: its token limits need its principal and role")
        except FormError as err:
            return await self.refuse(request, session, esc(str(err)), here)
        api = self.api(request, session)
        answer = await api.call("POST", "/api/v1/admin/tenants", json=body)
        if not answer.ok:
            if answer.status == 401:
                return await self.failed(request, session, answer, here)
            return await self.refuse(request, session, f"Not created: {esc(answer.error)}", here)
        done = f"Tenant {esc(name)} created."
        keys_page = f"/console/tenants/{name}"
        if principal:
            key = await api.call(
                "POST",
                f"/api/v1/admin/tenants/{name}/keys",
                json={"principal": principal, "roles": [role]}
                | ({"limits": limits} if limits else {}),
            )
            if not key.ok:
                return await self.refuse(
                    request, session, f"{done} Its key was not: {esc(key.error)}", keys_page
                )
            await self.flash(
                request,
                session,
                message(
                    "token",
                    f"{done} Its {esc(role)} key for {esc(principal)}: copy the token now, it is "
                    f'shown this once.<pre data-testid="new-token">{esc(key.body["token"])}</pre>',
                    test_id="new-key",
                ),
            )
            return redirect(keys_page)
        await self.flash(request, session, message("ok", done, test_id="saved"))
        return redirect(here)

    @post("/tenants/{tenant:str}/delete")
    async def delete(self, request: Request[Any, Any, Any], tenant: TenantName) -> Response[Any]:
        session = await self.signed_in(request)
        here = "/console/tenants"
        data = await request.form()
        version = data.get("version")
        if data.get("confirm") != tenant:
            return await self.refuse(
                request,
                session,
                f"Not deleted: type the tenant's name ({esc(tenant)}) to confirm.",
                here,
            )
        if not isinstance(version, str) or not version.isdigit() or len(version) > 18:
            return await self.failed(request, session, Answer(400, None), here)
        answer = await self.api(request, session).call(
            "DELETE", f"/api/v1/admin/tenants/{tenant}", headers={"If-Match": f'"{version}"'}
        )
        if not answer.ok:
            if answer.status == 401:
                return await self.failed(request, session, answer, here)
            return await self.refuse(request, session, f"Not deleted: {esc(answer.error)}", here)
        gone = answer.body if isinstance(answer.body, dict) else {}
        await self.flash(
            request,
            session,
            message(
                "ok",
                f"Tenant {esc(tenant)} deleted: {esc(gone.get('keys_revoked', 0))} keys revoked, "
                f"{esc(gone.get('workloads_cancelled', 0))} pending workloads cancelled.",
                test_id="saved",
            ),
        )
        return redirect(here)
