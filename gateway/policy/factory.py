"""Choosing the backend: an OPA server when a URL is configured, else embedded."""

from __future__ import annotations

from gateway.policy.decision import DECISIONS
from gateway.policy.embedded import EmbeddedOpa
from gateway.policy.engine import PolicyEngine
from gateway.policy.server import OpaServer

__all__ = ["create_policy_engine"]


def create_policy_engine(
    opa_url: str | None = None, *, timeout: float = 0.5, token: str | None = None
) -> PolicyEngine:
    """`OpaServer` at `opa_url` if given (``OPA_URL``), else `EmbeddedOpa`.

    Nothing connects or starts until the engine's `load`.
    """
    if opa_url:
        return OpaServer(opa_url, timeout=timeout, token=token)
    return EmbeddedOpa(timeout=timeout, warm=DECISIONS)
