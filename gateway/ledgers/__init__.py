"""Token ledgers for inference calls: rates and budgets over the cohort tree.

``create_ledger(url, config)`` gives the shared :class:`RedisLedger` when a Redis
URL is configured, else the in-process :class:`MemoryLedger`; both implement
:class:`Ledger` and give the same answers for the same calls.
"""

from __future__ import annotations

from gateway.ledgers.base import (
    Grant,
    KeyCharge,
    KeySpend,
    Ledger,
    LedgerUnavailableError,
    RecentSpend,
    Reclaimed,
    Refusal,
    Spent,
    SpentSource,
    UnknownQueueError,
)
from gateway.ledgers.memory import MemoryLedger
from gateway.ledgers.redis_ledger import DEFAULT_SOCKET_TIMEOUT, RedisLedger
from quota.model import QuotaConfig

__all__ = [
    "Grant",
    "KeyCharge",
    "KeySpend",
    "Ledger",
    "LedgerUnavailableError",
    "MemoryLedger",
    "RecentSpend",
    "Reclaimed",
    "RedisLedger",
    "Refusal",
    "Spent",
    "SpentSource",
    "UnknownQueueError",
    "create_ledger",
]


def create_ledger(
    redis_url: str | None,
    config: QuotaConfig,
    *,
    prefix: str = "ignara",
    timeout: float = DEFAULT_SOCKET_TIMEOUT,
) -> Ledger:
    """A ledger shared through Redis when ``redis_url`` is set, else an in-process one.
    ``timeout``: seconds to connect to Redis and to wait for each reply (the URL's
    ``socket_timeout`` / ``socket_connect_timeout`` win over it)."""
    if redis_url:
        return RedisLedger.from_url(
            redis_url, config, prefix=prefix, socket_connect_timeout=timeout, socket_timeout=timeout
        )
    return MemoryLedger(config)
