"""The in-process ledger behind the async interface (one replica, one event loop).

All the arithmetic is :class:`quota.ledger.InProcessLedger`'s; this adds whole
units, the grant's ``remaining``/``reset_after``, settle-once, and budgets restored
from what was spent before a restart. No locks: every method runs to completion
without awaiting, so calls never interleave.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import Mapping, Sequence

from gateway.ledgers.base import (
    Grant,
    KeyCharge,
    Reclaimed,
    Refusal,
    SpentSource,
    UnknownQueueError,
    check_actual,
    check_amounts,
    check_key,
    clock,
    key_in_milli,
    to_milli,
    to_units,
)
from quota.ledger import BUDGET_RESOURCES, InProcessLedger, Reservation, period_end
from quota.model import QuotaConfig
from quota.resources import MILLI, FlavorResource
from quota.tree import ResourceNode, potential_available

__all__ = ["MemoryLedger"]

log = logging.getLogger(__name__)

_FIRST_SWEEP = 1024
TPD = "tokens-per-day"


class MemoryLedger:
    """:class:`~gateway.ledgers.base.Ledger` on one process's memory."""

    def __init__(self, config: QuotaConfig) -> None:
        self._ledger = InProcessLedger(config)
        # Grants not yet settled, by id. Swept of the fully expired ones whenever it
        # doubles, so unsettled grants (a crashed call) cannot pile up.
        self._open: dict[str, Reservation] = {}
        self._sweep_at = _FIRST_SWEEP
        self._restored: list[Reservation] = []  # what restore_budgets charged
        self.owner = secrets.token_hex(8)
        self.foreign_settles = 0  # settles of a reservation that is not (or no longer) there

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
        at = clock(now)
        check_amounts(amounts)
        self._queue(queue)
        if key is not None:
            check_key(key)
            key = key_in_milli(key)
        result = self._ledger.reserve(queue, flavor, to_milli(amounts), at, key)
        if isinstance(result, Refusal):
            return _in_units(result)
        # Unique beyond this process: the id names the call's usage record and token
        # charges, which a restarted gateway's first calls must not collide with.
        grant_id = f"{self.owner}.{result.id}"
        self._open[grant_id] = result
        self._sweep()
        return Grant(
            id=grant_id,
            queue=queue,
            flavor=flavor,
            amounts=dict(amounts),
            remaining={r: to_units(self._ledger.available(queue, flavor, r, at)) for r in amounts},
            # its own reservation is the last to expire (quota.ledger.full_reset_after)
            reset_after={r: result.expires[r] - at for r in amounts},
            owner=self.owner,
            key_amounts={} if key is None else {r: to_units(a) for r, a in key.amounts.items()},
        )

    async def reconcile(
        self, grant: Grant, actual: Mapping[str, int], *, now: float | None = None
    ) -> None:
        used = check_actual(grant, actual)
        reservation = self._open.get(grant.id)
        if (
            reservation is None
            or (reservation.queue, reservation.flavor) != (grant.queue, grant.flavor)
            or grant.owner != self.owner
        ):
            self._foreign(grant)
            return
        del self._open[grant.id]
        self._ledger.reconcile(reservation, to_milli(used), clock(now))

    def _foreign(self, grant: Grant) -> None:
        """Count (and say once) a settle that found no reservation of its own to settle."""
        self.foreign_settles += 1
        if self.foreign_settles == 1:
            log.warning(
                "token ledger: a settle of reservation %s (queue %s) changed nothing: it is "
                "unknown, settled already or another's; later ones are only counted",
                grant.id,
                grant.queue,
            )

    async def release(self, grant: Grant, *, now: float | None = None) -> None:
        await self.reconcile(grant, dict.fromkeys(grant.resources, 0), now=now)

    def limit(self, queue: str, flavor: str, resource: str) -> int:
        node = self._queue(queue)
        return to_units(max(0, potential_available(node, FlavorResource(flavor, resource))))

    def nominal(self, queue: str, flavor: str, resource: str) -> int:
        return to_units(self._queue(queue).quota(FlavorResource(flavor, resource)).nominal)

    def covers(self, queue: str, flavor: str, resource: str) -> bool:
        node = self._ledger.state.queues.get(queue)
        return node is not None and FlavorResource(flavor, resource) in node.quotas

    async def update_config(self, config: QuotaConfig, *, now: float | None = None) -> None:
        self._ledger.rebuild(config, clock(now))

    async def usage(
        self, queue_or_cohort: str, flavor: str, resource: str, *, now: float | None = None
    ) -> int:
        at = clock(now)
        state = self._ledger.state
        if queue_or_cohort in state.queues:
            return to_units(self._ledger.usage(queue_or_cohort, flavor, resource, at))
        if queue_or_cohort in state.cohorts:
            return to_units(self._ledger.cohort_usage(queue_or_cohort, flavor, resource, at))
        raise UnknownQueueError(queue_or_cohort)

    async def key_usage(self, key: str, resource: str, *, now: float | None = None) -> int:
        return to_units(self._ledger.key_usage(key, resource, clock(now)))

    async def ping(self) -> None:
        return None

    @property
    def durable(self) -> bool:
        return False

    async def restore_budgets(
        self,
        spent: Mapping[tuple[str, str, str], int],
        *,
        measured_at: float,
        now: float | None = None,
        keys: Mapping[str, int] | None = None,
    ) -> None:
        """Charge what each (queue, flavor, budget resource) had spent in the period
        ``measured_at`` was in, and each API key of ``keys`` that day, replacing what
        an earlier call restored. A budget whose period has ended since, a queue gone
        from the configuration and a budget the queue does not have are left out."""
        at = clock(now)
        for reservation in self._restored:
            every = [*reservation.amounts, *reservation.key_amounts]
            self._ledger.reconcile(reservation, dict.fromkeys(every, 0), at)
        self._restored = []
        if keys and period_end(TPD, measured_at) == period_end(TPD, at):
            for key, tokens in keys.items():
                if tokens > 0:
                    self._restored.append(
                        self._ledger.charge_key_spent(key, {TPD: tokens * MILLI}, at)
                    )
        per_call: dict[tuple[str, str], dict[str, int]] = {}
        for (queue, flavor, resource), tokens in spent.items():
            if (
                tokens > 0
                and resource in BUDGET_RESOURCES
                and period_end(resource, measured_at) == period_end(resource, at)
                and self.covers(queue, flavor, resource)
            ):
                per_call.setdefault((queue, flavor), {})[resource] = tokens * MILLI
        for (queue, flavor), amounts in per_call.items():
            self._restored.append(self._ledger.charge_spent(queue, flavor, amounts, at))

    # A process that dies takes this ledger with it: nobody is left to reclaim from.

    def checkpoint(self, grant: Grant, tokens: int) -> None:
        return None

    async def forget(self, ids: Sequence[str]) -> None:
        return None

    async def renew_lease(self, seconds: float) -> None:
        return None

    async def drop_lease(self) -> None:
        return None

    async def reclaim(self, limit: int = 100, after: tuple[str, str] = ("", "")) -> list[Reclaimed]:
        return []

    async def settle_orphan(
        self, orphan: Reclaimed, tokens: int, *, now: float | None = None
    ) -> bool:
        return False

    def restore_from(self, spent: SpentSource) -> None:
        """Nothing to do: this ledger never loses its state but with its process, and
        :meth:`restore_budgets` restores that at start."""

    async def store_warnings(self) -> list[str]:
        return []

    async def aclose(self) -> None:
        return None

    def _queue(self, queue: str) -> ResourceNode:
        node = self._ledger.state.queues.get(queue)
        if node is None:
            raise UnknownQueueError(queue)
        return node

    def _sweep(self) -> None:
        if len(self._open) < self._sweep_at:
            return
        # Nothing left counting (every resource expired): nothing left to settle.
        self._open = {gid: r for gid, r in self._open.items() if r.live}
        self._sweep_at = max(_FIRST_SWEEP, 2 * len(self._open))


def _in_units(refusal: Refusal) -> Refusal:
    return dataclasses.replace(
        refusal,
        requested=to_units(refusal.requested),
        available=to_units(refusal.available),
        remaining={r: to_units(v) for r, v in refusal.remaining.items()},
    )
