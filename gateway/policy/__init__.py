"""Policy decisions in Rego: one fail-closed interface, two OPA backends.

    engine = create_policy_engine(settings.opa_url)      # EmbeddedOpa or OpaServer
    await engine.load(load_policies(policy_dir), {"ignara": {"tenants": ...}})
    decision = await engine.decide("ignara.authz.decision", {...})
    if not decision.allow: ... decision.reasons ...

The policies, their input and data schemas and their tests live in
`policies/rego/` (see its README).
"""

from __future__ import annotations

from gateway.policy.decision import ADMISSION, AUTHZ, DECISIONS, INFERENCE, Decision, FailureKind
from gateway.policy.embedded import EmbeddedOpa, RegoEvaluator
from gateway.policy.engine import PolicyEngine
from gateway.policy.errors import (
    EvaluationError,
    PolicyError,
    PolicyLoadError,
    UndefinedDocumentError,
)
from gateway.policy.factory import create_policy_engine
from gateway.policy.golib import GolibEvaluator
from gateway.policy.loader import load_policies, load_tests
from gateway.policy.rego_tests import RegoOutcome, RegoTest, RegoTestResult, discover_tests
from gateway.policy.server import OpaServer

__all__ = [
    "ADMISSION",
    "AUTHZ",
    "DECISIONS",
    "INFERENCE",
    "Decision",
    "EmbeddedOpa",
    "EvaluationError",
    "FailureKind",
    "GolibEvaluator",
    "OpaServer",
    "PolicyEngine",
    "PolicyError",
    "PolicyLoadError",
    "RegoEvaluator",
    "RegoOutcome",
    "RegoTest",
    "RegoTestResult",
    "UndefinedDocumentError",
    "create_policy_engine",
    "discover_tests",
    "load_policies",
    "load_tests",
]
