"""Asking the policy engine, and answering 403 with its reasons.

Every route asks ``ignara.authz`` with its action before doing anything; the policy
maps the action to the roles and the scope it needs (``policies/rego/authz.rego``).
"""

from __future__ import annotations

from typing import Any

from gateway.auth import ANY_TENANT, Identity
from gateway.errors import ApiError
from gateway.policy import ADMISSION, AUTHZ, PolicyEngine

__all__ = ["admit_by_policy", "authorize", "principal_of"]


def principal_of(identity: Identity) -> dict[str, Any]:
    principal: dict[str, Any] = {
        "id": identity.principal,
        "roles": sorted(identity.roles),
        "scopes": sorted(identity.scopes),
    }
    if identity.tenant != ANY_TENANT:
        principal["tenant"] = identity.tenant
    return principal


async def authorize(
    policy: PolicyEngine,
    identity: Identity,
    action: str,
    tenant: str | None = None,
    **resource: Any,
) -> None:
    """Raise 403 unless the authorization policy allows ``action`` on ``tenant``'s data;
    ``resource`` adds what else the policy reads (a key's ``roles`` and ``scopes``)."""
    if tenant is not None:
        resource["tenant"] = tenant
    decision = await policy.decide(
        AUTHZ, {"principal": principal_of(identity), "action": action, "resource": resource}
    )
    if not decision.allow:
        raise ApiError(403, "forbidden", "; ".join(decision.reasons))


async def admit_by_policy(policy: PolicyEngine, tenant: str, workload: dict[str, Any]) -> None:
    """Raise 403 unless the admission policy lets ``tenant`` submit ``workload``."""
    decision = await policy.decide(ADMISSION, {"tenant": tenant, "workload": workload})
    if not decision.allow:
        raise ApiError(403, "policy_denied", "; ".join(decision.reasons))
