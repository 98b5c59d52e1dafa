"""The scopes the policy asks for and the scopes keys are issued with agree: every
action needs exactly one known scope, and each role's default scopes are exactly
those its actions need (a key with all its role allows may do all its role may)."""

from __future__ import annotations

from typing import Any

from gateway.policy import PolicyEngine
from tenants.services.access import ROLE_SCOPES, SCOPES
from tests.policy.conftest import DATA, MakeEngine

AUTHZ = "ignara.authz.decision"
TENANT_ACTIONS = [
    "workloads.submit",
    "workloads.list",
    "workloads.read",
    "workloads.cancel",
    "workloads.logs",
    "quota.read",
    "usage.read",
    "models.list",
    "inference.call",
    "keys.list",
    "keys.create",
    "keys.revoke",
]
ADMIN_ACTIONS = [
    "admin.config.apply",
    "admin.config.read",
    "admin.tenants.list",
    "admin.tenants.delete",
    "admin.models.list",
    "admin.models.write",
    "admin.keys.create",
    "admin.keys.list",
    "admin.keys.revoke",
]


async def allowed(engine: PolicyEngine, role: str, scopes: list[str], action: str) -> bool:
    principal: dict[str, Any] = {"id": "p", "roles": [role], "scopes": scopes}
    if role != "admin":
        principal["tenant"] = "acme"
    resource = {"tenant": "acme", "roles": ["member"], "scopes": scopes}
    if action.startswith("admin."):
        resource = {"roles": ["admin"], "scopes": scopes}
    decision = await engine.decide(
        AUTHZ, {"principal": principal, "action": action, "resource": resource}
    )
    return decision.allow


async def test_roles_default_scopes_match_what_their_actions_need(
    make_engine: MakeEngine, policies: dict[str, str]
) -> None:
    engine = make_engine()
    await engine.load(policies, DATA)
    needed: dict[str, set[str]] = {}
    for action in TENANT_ACTIONS + ADMIN_ACTIONS:
        role = "admin" if action.startswith("admin.") else "tenant-admin"
        needed[action] = {s for s in SCOPES if await allowed(engine, role, [s], action)}
        assert len(needed[action]) == 1, (action, needed[action])
    for role, scopes in ROLE_SCOPES.items():
        actions = TENANT_ACTIONS if role != "admin" else TENANT_ACTIONS + ADMIN_ACTIONS
        permitted = {a for a in actions if await allowed(engine, role, list(SCOPES), a)}
        assert {a for a in permitted if await allowed(engine, role, sorted(scopes), a)} == permitted
        assert scopes == set().union(*(needed[a] for a in permitted)), role
