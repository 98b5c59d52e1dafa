"""Readiness: can this process serve right now? Each dependency is asked for real,
all at once, each within a time bound, and a failing one is named.

- ``database``: ``SELECT 1`` on the configured database;
- ``ledger``: the token ledger's store answers (Redis, when ``REDIS_URL`` is set; the
  in-process ledger always does);
- ``policy``: the policy engine makes a decision (embedded OPA, or the OPA server at
  ``OPA_URL``), which fails when it is unreachable or holds no policies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError

from gateway.ledgers import Ledger, LedgerUnavailableError
from gateway.policy import AUTHZ, PolicyEngine
from tenants import Database

__all__ = ["CHECK_TIMEOUT_SECONDS", "Readiness", "check_readiness"]

CHECK_TIMEOUT_SECONDS = 2.0
_MAX_DETAIL_CHARS = 300
# A decision nobody is granted: it exercises the engine without meaning anything.
_PROBE_INPUT: Mapping[str, object] = {"principal": {"id": "readyz", "roles": []}, "action": "none"}


class NotReadyError(Exception):
    """A dependency answered, but not as a ready one would."""


@dataclass(frozen=True)
class Readiness:
    """Per dependency, ``"ok"`` or why it is not."""

    checks: dict[str, str]

    @property
    def ready(self) -> bool:
        return all(result == "ok" for result in self.checks.values())

    @property
    def failing(self) -> list[str]:
        return [name for name, result in self.checks.items() if result != "ok"]

    def describe(self) -> str:
        return "; ".join(f"{name}: {self.checks[name]}" for name in self.failing)


async def check_readiness(
    database: Database,
    ledger: Ledger,
    policy: PolicyEngine,
    *,
    timeout: float = CHECK_TIMEOUT_SECONDS,
) -> Readiness:
    checks: dict[str, Callable[[], Awaitable[None]]] = {
        "database": database.ping,
        "ledger": ledger.ping,
        "policy": lambda: _decide(policy),
    }
    results = await asyncio.gather(*(_bounded(check, timeout) for check in checks.values()))
    return Readiness(dict(zip(checks, results, strict=True)))


async def _decide(policy: PolicyEngine) -> None:
    decision = await policy.decide(AUTHZ, _PROBE_INPUT)
    if decision.failure is not None:
        raise NotReadyError("; ".join(decision.reasons))


async def _bounded(check: Callable[[], Awaitable[None]], timeout: float) -> str:
    try:
        await asyncio.wait_for(check(), timeout)
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except (OSError, SQLAlchemyError, LedgerUnavailableError, NotReadyError) as err:
        return f"unreachable: {_one_line(err)}"
    return "ok"


def _one_line(err: Exception) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text[:_MAX_DETAIL_CHARS]
