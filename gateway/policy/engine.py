"""The one interface the gateway uses to ask policy questions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from gateway.policy.decision import Decision
from gateway.policy.rego_tests import RegoTestResult

__all__ = ["PolicyEngine"]


@runtime_checkable
class PolicyEngine(Protocol):
    """A Rego engine holding the gateway's policies and data.

    Fail closed: `decide` never raises. Undefined, an evaluation error, a
    malformed result, an unreachable engine or no answer within the engine's
    timeout are all a deny whose reason says which (and whose `failure` is set).
    """

    async def load(self, policies: Mapping[str, str], data: Mapping[str, object]) -> None:
        """Replace all policies (module id -> Rego source) and the data document.

        On failure raises `PolicyLoadError`. The embedded engine validates
        everything before switching over and keeps what it had; an OPA server
        keeps the previous version of a refused module (see `OpaServer`).
        """
        ...

    async def decide(self, path: str, input: Mapping[str, object]) -> Decision:
        """Evaluate the decision at `path` (``ignara.authz.decision`` or
        ``ignara/authz/decision``) for `input`."""
        ...

    async def run_tests(self, tests: Mapping[str, str]) -> list[RegoTestResult]:
        """Run the `test_` rules of `tests` (module id -> source) against the
        loaded policies and data, without leaving the test modules loaded."""
        ...

    async def ready(self) -> bool:
        """Whether policies are loaded and decisions can be made."""
        ...

    async def close(self) -> None:
        """Release the engine; later decisions are denied."""
        ...
