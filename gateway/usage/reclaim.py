"""A gateway that dies mid-call leaves reservations charged and calls unrecorded; the
live gateways settle and record them.

Each gateway holds a lease in the shared ledger (renewed every third of its length).
Its calls' reservations name it, carry a note of the call (tenant, principal, key,
model, prompt estimate), and stay in the ledger until their usage records are written
(:meth:`UsageRecorder` tells the ledger to :meth:`~gateway.ledgers.Ledger.forget`
them). A stream notes its tokens so far about every second. Once a gateway's lease
has expired, any live gateway takes its reservations in rounds: one still open is
settled at the tokens last noted (the prompt estimate if none), one settled already
keeps what it was settled at; each is recorded as ``estimated`` under its reservation
id, which the database keeps unique, so a call is never recorded twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import msgspec

from gateway.ledgers import Ledger, LedgerUnavailableError, Reclaimed
from gateway.usage.recorder import UsageRecorder
from tenants.services.usage import UsageRecord

__all__ = ["BROKEN", "Reclaimer"]

log = logging.getLogger(__name__)

# The status a call whose gateway died mid-call is recorded with: its client saw the
# connection drop, which a proxy in front reports as a bad gateway.
BROKEN = 502
_QUEUED_MAX = 100_000
_decoder = msgspec.json.Decoder()


@dataclass
class Reclaimer:
    ledger: Ledger
    recorder: UsageRecorder
    lease_seconds: float
    batch: int = 200
    reclaimed: int = 0  # reservations this gateway settled or recorded for a dead one
    # ids of dead gateways' calls this one queued for recording
    _queued: set[str] = field(default_factory=set)

    # A Redis outage is told by the calls that fail (gateway.outages): these rounds only
    # try again at their next turn, quietly.

    async def renew(self) -> None:
        """One lease renewal (a background round: never raises)."""
        try:
            await self.ledger.renew_lease(self.lease_seconds)
        except LedgerUnavailableError as err:
            log.debug("cannot renew the lease: %s", err)

    async def round(self) -> None:
        """Settle and record what dead gateways left (a background round)."""
        after = ("", "")
        try:
            while orphans := await self.ledger.reclaim(self.batch, after):
                for orphan in orphans:
                    await self._take(orphan)
                if len(orphans) < self.batch:
                    break
                after = (orphans[-1].owner, orphans[-1].id)
        except LedgerUnavailableError as err:
            log.debug("cannot reclaim dead gateways' calls: %s", err)

    async def _take(self, orphan: Reclaimed) -> None:
        note = _parse(orphan.note)
        prompt = _count(note.get("prompt"))
        if orphan.settled is not None:
            if orphan.id in self._queued:
                return  # queued for writing by an earlier round: not yet written
            tokens, status = orphan.settled, 200
        else:
            tokens = orphan.checkpoint if orphan.checkpoint is not None else prompt
            if not await self.ledger.settle_orphan(orphan, tokens):
                return  # another gateway settled it first, and records it
            status = BROKEN
        if len(self._queued) >= _QUEUED_MAX:  # a bound; a repeat is only skipped by SQL
            self._queued.clear()
        self._queued.add(orphan.id)
        self.reclaimed += 1
        if self.reclaimed == 1:
            log.warning(
                "gateway %s died with calls in flight; settling and recording them as "
                "estimated (first: reservation %s of queue %s at %d tokens)",
                orphan.owner,
                orphan.id,
                orphan.queue,
                tokens,
            )
        self.recorder.record(
            UsageRecord(
                tenant=str(note.get("tenant", "")),
                principal=str(note.get("principal", "")),
                queue=orphan.queue,
                model=str(note.get("model", "")),
                flavor=orphan.flavor,
                status=status,
                prompt_tokens=min(prompt, tokens),
                completion_tokens=tokens - min(prompt, tokens),
                streamed=bool(note.get("stream", False)),
                api_key_id=note.get("key") if isinstance(note.get("key"), str) else None,
                reservation=orphan.id,
                estimated=True,
            )
        )


def _parse(note: str) -> dict[str, Any]:
    try:
        value = _decoder.decode(note) if note else {}
    except msgspec.DecodeError:
        value = {}
    return value if isinstance(value, dict) else {}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
