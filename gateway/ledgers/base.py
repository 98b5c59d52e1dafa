"""The token ledger as the gateway sees it: reserve, reconcile, release.

Every amount at this interface is a whole count of tokens or requests. The quota
engine counts milli-units (``nominal: 1000`` tokens is 1,000,000 inside
:mod:`quota`), so both ledgers convert on the way in and, rounding down, on the
way out (``remaining``, ``limit``, ``usage``, a refusal's ``available``).

A grant is settled once: the first :meth:`Ledger.reconcile` or
:meth:`Ledger.release` corrects it, later ones are no-ops; so is a settle whose
grant names another queue, flavor or owner than the reservation of its id (ledgers
count those as ``foreign_settles`` and log the first). That keeps a retried
release from refunding twice, and lets the Redis ledger drop a reservation's
record as soon as it is settled instead of keeping it for a month.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from quota.ledger import BUDGET_RESOURCES, KEY_RESOURCES, RATE_RESOURCES, KeyCharge, Refusal
from quota.model import QuotaConfig
from quota.resources import MILLI

__all__ = [
    "MAX_AMOUNT",
    "Grant",
    "KeyCharge",
    "KeySpend",
    "Ledger",
    "LedgerUnavailableError",
    "RecentSpend",
    "Reclaimed",
    "Refusal",
    "Spent",
    "SpentSource",
    "UnknownQueueError",
    "check_actual",
    "check_amounts",
    "check_key",
    "clock",
    "key_in_milli",
    "to_milli",
    "to_units",
]

# Lua numbers are doubles: milli-amounts stay exact below 2**53, so no single amount
# (in tokens or requests) may be larger than this.
MAX_AMOUNT = 2**53 // MILLI


class UnknownQueueError(KeyError):
    """The cluster queue is not in the quota configuration."""

    def __init__(self, queue: str) -> None:
        super().__init__(queue)
        self.queue = queue

    def __str__(self) -> str:
        return f"unknown cluster queue {self.queue!r}"


class LedgerUnavailableError(Exception):
    """The shared ledger cannot be reached or answered wrongly.

    Raised instead of the store's own errors (Redis, sockets, timeouts), which it
    chains as ``__cause__``, so callers need not know what the ledger runs on. Whether
    a reservation or settlement happened is then unknown."""


@dataclass(frozen=True, slots=True)
class Grant:
    """A live reservation (amounts in tokens or requests)."""

    id: str
    queue: str
    flavor: str
    amounts: dict[str, int]  # what was reserved, per resource
    remaining: dict[str, int]  # per resource: what the queue may still take (>= 0)
    # per resource: seconds until ``remaining`` is back at the limit if nothing more is
    # reserved (quota.ledger.full_reset_after: a rate's window, a budget's period end)
    reset_after: dict[str, float]
    # The ledger (gateway process) that made it: a settle must come from it, so a
    # grant of another process (or of before a Redis restart) never settles this one.
    owner: str = ""
    # What it holds at its API key's own level, per resource (empty: the key has no
    # limits); settled with the same ``actual`` as the queue's resources of that name.
    key_amounts: dict[str, int] = field(default_factory=dict)

    @property
    def resources(self) -> set[str]:
        """Every resource the grant holds, at the queue's level or the key's."""
        return {*self.amounts, *self.key_amounts}


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """A reservation of a gateway whose lease expired (it died): to settle and record."""

    id: str
    owner: str  # the gateway that made it
    queue: str
    flavor: str
    amounts: dict[str, int]  # what was reserved (the estimate)
    note: str  # what the gateway noted of the call at its reservation
    checkpoint: int | None  # the tokens it last said the call had used, if it did
    settled: int | None  # the tokens it was settled at, if its gateway settled it
    key_amounts: dict[str, int] = field(default_factory=dict)  # at its key's level

    def grant(self) -> Grant:
        return Grant(
            self.id,
            self.queue,
            self.flavor,
            dict(self.amounts),
            {},
            {},
            self.owner,
            dict(self.key_amounts),
        )


@dataclass(frozen=True, slots=True)
class RecentSpend:
    """What one queue spent of one flavor in the last rate window, as recorded."""

    tokens: int
    requests: int
    last_at: float  # when the latest of those calls was recorded (seconds since the epoch)


@dataclass(frozen=True, slots=True)
class KeySpend:
    """What one API key spent, as recorded: today (UTC) and in the last rate window."""

    day: int
    recent: int
    last_at: float  # when the latest call of the last window was recorded (0: none)


@dataclass(frozen=True)
class Spent:
    """The durable account of what queues spent, to rebuild a ledger that lost it."""

    measured_at: float
    # (queue, flavor, budget resource) -> tokens spent in the periods measured_at is in
    budgets: Mapping[tuple[str, str, str], int] = field(default_factory=dict)
    # (queue, flavor) -> what was spent in the last minute (for the per-minute rates)
    recent: Mapping[tuple[str, str], RecentSpend] = field(default_factory=dict)
    # API key id -> what it spent (keys with limits of their own only)
    keys: Mapping[str, KeySpend] = field(default_factory=dict)


SpentSource = Callable[[], Awaitable[Spent]]
"""Reads :class:`Spent` from the durable store (the usage records)."""


class Ledger(Protocol):
    """Token rates and budgets over the cohort tree, shared or in-process.

    ``now`` (seconds since the epoch) defaults to :func:`time.time`; tests pass it.
    Unknown queues raise :class:`UnknownQueueError`; resources other than rates and
    budgets, negative amounts and an empty reservation raise :class:`ValueError`.
    A shared ledger whose store cannot be reached, times out or answers wrongly raises
    :class:`LedgerUnavailableError` from every method that talks to the store (all
    the ``async`` ones): the caller decides whether to refuse the call or let it
    through unmetered, and a failed :meth:`reconcile` or :meth:`release` leaves the
    estimate charged until its window or period ends. The in-process ledger never
    raises it.
    """

    # Settles that changed nothing: no reservation of the grant's id (settled already,
    # or lost with the store's state), or one of another queue, flavor or owner.
    foreign_settles: int

    async def reserve(
        self,
        queue: str,
        flavor: str,
        amounts: Mapping[str, int],
        *,
        now: float | None = None,
        note: str | None = None,
        key: KeyCharge | None = None,
    ) -> Grant | Refusal:
        """Reserve every amount over the queue and its cohorts at once, or nothing.
        ``note``: what a shared ledger keeps with the reservation until the call's usage
        record is written (:meth:`forget`), for another gateway to record the call
        (:meth:`reclaim`) should this one die first. ``key``: the call's API key's own
        limits, a level below the queue that must fit too (in the same atomic step); a
        refusal by it names level ``Key`` and the key's id, and takes nothing anywhere."""
        ...

    def checkpoint(self, grant: Grant, tokens: int) -> None:
        """Note the tokens a live call has used so far (fire and forget): what it is
        settled at if its gateway dies."""
        ...

    async def forget(self, ids: Sequence[str]) -> None:
        """The usage records of these settled reservations are written: drop them."""
        ...

    async def renew_lease(self, seconds: float) -> None:
        """Hold (or extend) this gateway's lease for ``seconds``."""
        ...

    async def drop_lease(self) -> None:
        """Give the lease up (a graceful stop, every record written)."""
        ...

    async def reclaim(self, limit: int = 100, after: tuple[str, str] = ("", "")) -> list[Reclaimed]:
        """Up to ``limit`` reservations of gateways whose lease expired, live or settled
        but not yet recorded (settle the live ones with :meth:`settle_orphan`), in
        (owner, id) order after ``after`` (the last one of the previous page)."""
        ...

    async def settle_orphan(
        self, orphan: Reclaimed, tokens: int, *, now: float | None = None
    ) -> bool:
        """Settle a dead gateway's live reservation at ``tokens`` (one request); False
        if someone else settled it first."""
        ...

    async def reconcile(
        self, grant: Grant, actual: Mapping[str, int], *, now: float | None = None
    ) -> None:
        """Replace the estimate by what was used (a resource left out keeps its
        estimate): refund the difference, or charge an overrun even past the quota.
        A resource whose window or period has ended is left alone. The key's level, if
        the grant holds some, is settled with the same amounts."""
        ...

    async def release(self, grant: Grant, *, now: float | None = None) -> None:
        """Refund everything (the call failed upstream): reconcile to 0, at the key's
        level too."""
        ...

    def limit(self, queue: str, flavor: str, resource: str) -> int:
        """The most the queue could ever get: its nominal quota plus what it may borrow
        along its path (for ``x-ratelimit-limit-*``)."""
        ...

    def nominal(self, queue: str, flavor: str, resource: str) -> int:
        """The queue's own nominal quota (0 without a quota entry)."""
        ...

    def covers(self, queue: str, flavor: str, resource: str) -> bool:
        """Whether the queue has a quota entry for the flavor-resource (False if the
        queue is unknown)."""
        ...

    async def update_config(self, config: QuotaConfig, *, now: float | None = None) -> None:
        """Adopt a changed quota configuration, keeping live reservations counted."""
        ...

    async def usage(
        self, queue_or_cohort: str, flavor: str, resource: str, *, now: float | None = None
    ) -> int:
        """What a queue (or, if no queue has the name, a cohort) holds now."""
        ...

    async def key_usage(self, key: str, resource: str, *, now: float | None = None) -> int:
        """What an API key's own level holds of ``resource`` now (0 for a key unknown
        to the ledger: one without limits, or idle)."""
        ...

    async def ping(self) -> None:
        """Raise :class:`LedgerUnavailableError` unless the ledger's store answers (the
        in-process ledger always does)."""
        ...

    @property
    def durable(self) -> bool:
        """Whether budgets outlive this process (kept in a shared store)."""
        ...

    async def restore_budgets(
        self,
        spent: Mapping[tuple[str, str, str], int],
        *,
        measured_at: float,
        now: float | None = None,
        keys: Mapping[str, int] | None = None,
    ) -> None:
        """Charge budgets with what was spent before this ledger started, per (queue,
        flavor, budget resource) in the periods ``measured_at`` was in, and per API key
        (``keys``: tokens of that day) at the key's level, replacing what an earlier
        call restored; a no-op for a :attr:`durable` ledger."""
        ...

    def restore_from(self, spent: SpentSource) -> None:
        """Where a shared ledger reads what was spent, to rebuild itself when its store
        lost its state (a Redis restart without persistence); it grants nothing until
        it has. A no-op for the in-process ledger."""
        ...

    async def store_warnings(self) -> list[str]:
        """What is wrong with the store's settings for a ledger (empty if nothing)."""
        ...

    async def aclose(self) -> None: ...


def clock(now: float | None) -> float:
    return time.time() if now is None else now


def check_amounts(amounts: Mapping[str, int]) -> None:
    """Refuse what neither ledger could count (the same check for both)."""
    if not amounts:
        raise ValueError("a reservation needs at least one resource")
    for resource, amount in amounts.items():
        if resource not in RATE_RESOURCES and resource not in BUDGET_RESOURCES:
            raise ValueError(f"{resource!r} is not a rate or budget resource")
        _check_amount(resource, amount)


def check_key(key: KeyCharge) -> None:
    """Refuse a key charge neither ledger could count."""
    if set(key.limits) != set(key.amounts) or not set(key.amounts) <= set(KEY_RESOURCES):
        raise ValueError(f"a key limits only {', '.join(KEY_RESOURCES)}, each with an amount")
    for resource in key.amounts:
        _check_amount(resource, key.amounts[resource])
        _check_amount(resource, key.limits[resource])


def check_actual(grant: Grant, actual: Mapping[str, int]) -> dict[str, int]:
    """The grant's resources (the key's level's too) with what was used (left out: the
    estimate stands)."""
    used = {r: actual[r] for r in grant.amounts if r in actual}
    for resource in grant.key_amounts:
        if resource in actual:
            used[resource] = actual[resource]
    for resource, amount in used.items():
        _check_amount(resource, amount)
    return used


def _check_amount(resource: str, amount: int) -> None:
    if not 0 <= amount <= MAX_AMOUNT:
        raise ValueError(f"{resource}: {amount} is not between 0 and {MAX_AMOUNT}")


def to_milli(amounts: Mapping[str, int]) -> dict[str, int]:
    return {resource: amount * MILLI for resource, amount in amounts.items()}


def key_in_milli(key: KeyCharge) -> KeyCharge:
    return KeyCharge(key.key, to_milli(key.limits), to_milli(key.amounts))


def to_units(milli: int) -> int:
    """Milli-units to whole units, rounding down (what is left is never overstated)."""
    return milli // MILLI
