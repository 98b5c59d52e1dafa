"""The tenants page's forms (the page is :mod:`gateway.console.pages`'; the handlers
they post to, :mod:`gateway.console.tenants`)."""

from __future__ import annotations

from gateway.console.html import esc, field, form, select, version_field

__all__ = ["NAME", "ROLES", "create_tenant_form", "delete_tenant_form"]

NAME = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
ROLES = ("", "tenant-admin", "member")


def create_tenant_form(csrf: str) -> str:
    return form(
        "/console/tenant-create",
        csrf,
        field("name", "name", required=True, maxlength=63, pattern=NAME, ident="tenant-name")
        + field("display_name", "display name", maxlength=200)
        + field("queues", "queues", maxlength=4096, placeholder="team-a, team-b")
        + '<span class="muted">first key (optional):</span>'
        + field("principal", "principal", maxlength=64, ident="first-principal")
        + select("role", "role", ROLES, empty="no key")
        + "".join(
            field(name, name.replace("_", " "), maxlength=24, placeholder="no limit", size=10)
            for name in ("tokens_per_minute", "tokens_per_day")
        ),
        button="Create tenant",
        css="editor",
        test_id="create-tenant",
    )


def delete_tenant_form(csrf: str, tenant: str, version: object) -> str:
    """The delete names the tenant's version as listed: a tenant changed since is not
    removed unseen (412)."""
    return form(
        f"/console/tenants/{tenant}/delete",
        csrf,
        version_field(version)
        + (
            '<input name="confirm" size="10" maxlength="63" required'
            f' placeholder="type {esc(tenant)}" aria-label="type {esc(tenant)} to confirm"'
            f' data-testid="confirm-{esc(tenant)}">'
        ),
        button="Delete",
        danger=True,
    )
