"""Representative decisions: every backend gives the same allow and reasons.

Each case states the decision it expects; a case runs once per backend, so a
backend that disagrees fails the same case the other passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from gateway.policy import Decision, PolicyEngine

AUTHZ = "ignara.authz.decision"
ADMISSION = "ignara/admission/decision"

MEMBER_SCOPES = ["inference", "usage:read", "workloads:read", "workloads:write"]
ALICE = {"id": "alice", "tenant": "acme", "roles": ["member"], "scopes": MEMBER_SCOPES}
AMY = {
    "id": "amy",
    "tenant": "acme",
    "roles": ["tenant-admin"],
    "scopes": [*MEMBER_SCOPES, "keys:read", "keys:write"],
}
GARY = {"id": "gary", "tenant": "globex", "roles": ["member"], "scopes": MEMBER_SCOPES}
ROOT = {"id": "root", "roles": ["admin"], "scopes": [*AMY["scopes"], "admin"]}
READER = {"id": "reader", "tenant": "acme", "roles": ["member"], "scopes": ["usage:read"]}

WORKLOAD: dict[str, Any] = {
    "name": "llama-finetune",
    "queue": "acme-main",
    "backend": "slurm",
    "max_runtime_seconds": 3600,
    "pod_sets": [
        {"name": "workers", "count": 2, "requests": {"nvidia.com/gpu": 8}, "flavors": ["h100"]},
        {"name": "coordinator", "count": 1, "requests": {"cpu": "4"}},
    ],
}


def workload(**changes: Any) -> dict[str, Any]:
    return {**WORKLOAD, **changes}


@dataclass(frozen=True)
class Case:
    id: str
    path: str
    input: dict[str, Any]
    allow: bool
    reasons: tuple[str, ...] = ()


CASES = [
    Case(
        "member submits to own tenant",
        AUTHZ,
        {"principal": ALICE, "action": "workloads.submit", "resource": {"tenant": "acme"}},
        allow=True,
    ),
    Case(
        "member of another tenant cannot cancel",
        AUTHZ,
        {"principal": GARY, "action": "workloads.cancel", "resource": {"tenant": "acme"}},
        allow=False,
        reasons=('principal of tenant "globex" may not act on resources of tenant "acme"',),
    ),
    Case(
        "member cannot create keys",
        AUTHZ,
        {
            "principal": {**ALICE, "scopes": ["keys:write"]},
            "action": "keys.create",
            "resource": {"tenant": "acme", "roles": ["member"], "scopes": ["keys:write"]},
        },
        allow=False,
        reasons=(
            'role "member" is not below the caller\'s own (roles [member]): only a platform '
            "admin may create or revoke such a key",
            'roles [member] do not permit "keys.create"; it needs one of: admin, tenant-admin',
        ),
    ),
    Case(
        "tenant admin revokes own tenant's member key",
        AUTHZ,
        {
            "principal": AMY,
            "action": "keys.revoke",
            "resource": {"tenant": "acme", "id": "k1", "roles": ["member"]},
        },
        allow=True,
    ),
    Case(
        "tenant admin cannot revoke a tenant admin's key",
        AUTHZ,
        {
            "principal": AMY,
            "action": "keys.revoke",
            "resource": {"tenant": "acme", "id": "k2", "roles": ["tenant-admin"]},
        },
        allow=False,
        reasons=(
            'role "tenant-admin" is not below the caller\'s own (roles [tenant-admin]): only '
            "a platform admin may create or revoke such a key",
        ),
    ),
    Case(
        "a usage reader cannot submit",
        AUTHZ,
        {"principal": READER, "action": "workloads.submit", "resource": {"tenant": "acme"}},
        allow=False,
        reasons=(
            'scopes [usage:read] do not permit "workloads.submit"; it needs scope '
            '"workloads:write"',
        ),
    ),
    Case(
        "a usage reader reads usage",
        AUTHZ,
        {"principal": READER, "action": "usage.read", "resource": {"tenant": "acme"}},
        allow=True,
    ),
    Case(
        "tenant admin cannot reach admin routes",
        AUTHZ,
        {"principal": AMY, "action": "admin.tenants.create"},
        allow=False,
        reasons=(
            'action "admin.tenants.create" needs the admin role',
            "scopes [inference, keys:read, keys:write, usage:read, workloads:read, "
            'workloads:write] do not permit "admin.tenants.create"; it needs scope "admin"',
        ),
    ),
    Case(
        "admin reaches admin routes",
        AUTHZ,
        {"principal": ROOT, "action": "admin.cohorts.update"},
        allow=True,
    ),
    Case(
        "admin cannot spend a tenant's quota",
        AUTHZ,
        {"principal": ROOT, "action": "workloads.submit", "resource": {"tenant": "acme"}},
        allow=False,
        reasons=('"workloads.submit" spends quota and needs a principal of tenant "acme"',),
    ),
    Case(
        "suspended tenant",
        AUTHZ,
        {
            "principal": {**GARY, "id": "ian", "tenant": "initech"},
            "action": "workloads.list",
            "resource": {"tenant": "initech"},
        },
        allow=False,
        reasons=('tenant "initech" is suspended',),
    ),
    Case(
        "empty authz input",
        AUTHZ,
        {},
        allow=False,
        reasons=(
            "input.action is missing or not a string",
            "input.principal is missing or not an object",
        ),
    ),
    Case("workload that fits", ADMISSION, {"tenant": "acme", "workload": WORKLOAD}, allow=True),
    Case(
        "foreign queue, closed backend and flavor",
        ADMISSION,
        {"tenant": "globex", "workload": workload(queue="acme-main")},
        allow=False,
        reasons=(
            'backend "slurm" is not open to tenant "globex" (allowed: ray)',
            'flavor "h100" is not open to tenant "globex" (allowed: a100)',
            'queue "acme-main" is not open to tenant "globex" (allowed: globex-main)',
        ),
    ),
    Case(
        "gang and GPUs over the limits",
        ADMISSION,
        {
            "tenant": "acme",
            "workload": workload(
                pod_sets=[{"name": "w", "count": 20, "requests": {"nvidia.com/gpu": "2"}}]
            ),
        },
        allow=False,
        reasons=(
            'gang of 20 pods is over tenant "acme"\'s limit of 16 pods per workload',
            "workload asks for 40 GPUs (nvidia.com/gpu: pod count x per-pod request, summed "
            'over pod sets), over tenant "acme"\'s limit of 32 per workload',
        ),
    ),
    Case(
        "malformed pod sets",
        ADMISSION,
        {
            "tenant": "acme",
            "workload": workload(
                pod_sets=[{"name": "w", "count": "2", "requests": {"nvidia.com/gpu": -1}}]
            ),
        },
        allow=False,
        reasons=(
            'pod set "w": count must be a whole number of pods, not "2"',
            'pod set "w": nvidia.com/gpu must be a whole number of GPUs per pod, not -1',
        ),
    ),
    Case(
        "unknown tenant",
        ADMISSION,
        {"tenant": "umbrella", "workload": WORKLOAD},
        allow=False,
        reasons=('tenant "umbrella" is not known to the gateway',),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
async def test_decision(engine: PolicyEngine, case: Case) -> None:
    decision = await engine.decide(case.path, case.input)
    assert decision == Decision(allow=case.allow, reasons=case.reasons)


async def test_decisions_are_repeatable_on_one_engine(engine: PolicyEngine) -> None:
    decisions = [await engine.decide(case.path, case.input) for case in CASES]
    again = [await engine.decide(case.path, case.input) for case in reversed(CASES)]
    assert decisions == list(reversed(again))
    assert [d.allow for d in decisions] == [case.allow for case in CASES]


async def test_ready_once_loaded(engine: PolicyEngine) -> None:
    assert await engine.ready()
