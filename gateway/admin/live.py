"""Live state for the console: `GET /api/v1/admin/queues`, `/cohorts` and the event
stream `/events`.

Who sees what:
  * a platform admin sees every queue and cohort and every event;
  * a tenant admin sees the queues its tenant may use and its tenant's workload events
    (and config changes to its tenant or its queues); cohorts hold other tenants'
    queues, so `/cohorts` answers a tenant admin 403;
  * anyone else: 403 (no credentials: 401).

The queues and cohorts come from :class:`gateway.admission.state.LiveBoard` (the
admission leader's last pass, or a snapshot at most two seconds old), never from a scan
per request. The stream polls the workload timeline (``workload_events``) and the audit
log by id, so an event's ``id:`` (``<workload event id>-<audit id>``) resumes it exactly
through ``Last-Event-ID``. An idle stream reads no rows: it waits for the process's
shared reader of the newest ids (:mod:`gateway.newest_ids`) to pass its own.
"""

from __future__ import annotations

import asyncio
import bisect
import re
import time
import weakref
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, cast

import msgspec
from litestar import Controller, Request, get
from litestar.di import NamedDependency
from litestar.params import HeaderParameter, Parameter
from litestar.response import Stream
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import col, select

from gateway.admission.state import CohortState, Level, LiveBoard, LiveSummary, Oldest, amount
from gateway.auth import ANY_TENANT, Identity
from gateway.authorization import authorize
from gateway.errors import ApiError
from gateway.http_protocol import CLOSING
from gateway.newest_ids import POLL_SECONDS, NewestIds, newest_ids
from gateway.openapi import errors
from gateway.policy.data import CONFIG_KINDS
from gateway.services import Services
from gateway.stream_slots import Slot
from quota.budgets import is_budget
from tenants import Database
from tenants.models import AuditEntry, WorkloadEventRow, WorkloadRow

__all__ = ["LiveController"]

# The name a page ended with (queue and cohort names are DNS labels or subdomains).
Cursor = Annotated[
    str | None, Parameter(max_length=253, pattern=r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")
]
Limit = Annotated[int, Parameter(ge=1, le=500)]
_EVENT_ID = re.compile(r"^(\d{1,18})-(\d{1,18})$")

BATCH = 200  # rows read per poll and kind: what one connection holds at most
RETRY_AFTER_SECONDS = 30  # a 429 for one stream too many: when to try again
GAP_WAIT = 2.0  # how long a missing id holds later ones back (its transaction may commit)
RETRY_MS = 2000


class LevelOut(msgspec.Struct, omit_defaults=True):
    """Amounts of one flavor and resource: quantities (GPUs, cores), or hours for a
    budget (``nvidia.com/gpu-hours``)."""

    flavor: str
    resource: str
    nominal: float
    usage: float
    borrowed: float
    lent: float
    borrowing_limit: float | None
    lending_limit: float | None
    subtree_nominal: float | None = None
    charged: float | None = None
    committed: float | None = None

    @classmethod
    def of(cls, level: Level) -> LevelOut:
        def shown(value: int | None) -> float | None:
            return None if value is None else amount(level.resource, value)

        return cls(
            level.flavor,
            level.resource,
            amount(level.resource, level.nominal),
            amount(level.resource, level.usage),
            amount(level.resource, level.borrowed),
            amount(level.resource, level.lent),
            shown(level.borrowing_limit),
            shown(level.lending_limit),
            shown(level.subtree_nominal),
            shown(level.charged) if is_budget(level.resource) else None,
            shown(level.committed) if is_budget(level.resource) else None,
        )


class OldestOut(msgspec.Struct):
    id: str
    created_at: datetime

    @classmethod
    def of(cls, oldest: Oldest | None) -> OldestOut | None:
        return None if oldest is None else cls(oldest.id, oldest.created_at)


class QueueOut(msgspec.Struct):
    name: str
    cohort: str | None
    tenants: list[str]
    admitted: int
    pending: int
    oldest_pending: OldestOut | None
    resources: list[LevelOut]


class CohortOut(msgspec.Struct):
    name: str
    parent: str | None
    cohorts: list[str]
    queues: list[str]
    admitted: int
    pending: int
    oldest_pending: OldestOut | None
    resources: list[LevelOut]

    @classmethod
    def of(cls, cohort: CohortState) -> CohortOut:
        return cls(
            cohort.name,
            cohort.parent,
            list(cohort.cohorts),
            list(cohort.queues),
            cohort.admitted,
            cohort.pending,
            OldestOut.of(cohort.oldest_pending),
            [LevelOut.of(level) for level in cohort.levels],
        )


class QueueList(msgspec.Struct):
    as_of: datetime
    source: str  # "leader" (the last admission pass) or "snapshot" (read from the database)
    items: list[QueueOut]
    next_cursor: str | None


class CohortList(msgspec.Struct):
    as_of: datetime
    source: str
    items: list[CohortOut]
    next_cursor: str | None


class LiveController(Controller):
    path = "/api/v1/admin"
    tags = ["admin"]

    @get("/queues", operation_id="ListQueueStates", responses=errors(400))
    async def queues(
        self,
        request: Request[Identity, Any, Any],
        services: NamedDependency[Services],
        limit: Limit = 100,
        cursor: Cursor = None,
        cohort: Annotated[str | None, Parameter(max_length=253)] = None,
    ) -> QueueList:
        """Each queue's quota, usage, borrowed and lent amounts per flavor and resource,
        its pending count and oldest pending workload, by name; ``cursor`` is the
        ``next_cursor`` of the page before; ``cohort``: only the queues right in it."""
        viewer = await _viewer(services, request.user)
        summary = await _board(services).current()
        names = sorted(summary.queues) if viewer is None else summary.queues_of(viewer)
        if cohort is not None:
            names = [n for n in names if summary.queues[n].cohort == cohort]
        page, next_cursor = _page(names, cursor, limit)
        items = []
        for name in page:
            queue = summary.queues[name]
            tenants = list(queue.tenants) if viewer is None else [viewer]
            items.append(
                QueueOut(
                    queue.name,
                    queue.cohort,
                    tenants,
                    queue.admitted,
                    queue.pending,
                    OldestOut.of(queue.oldest_pending),
                    [LevelOut.of(level) for level in queue.levels],
                )
            )
        return QueueList(summary.as_of, summary.source, items, next_cursor)

    @get("/cohorts", operation_id="ListCohortStates", responses=errors(400))
    async def cohorts(
        self,
        request: Request[Identity, Any, Any],
        services: NamedDependency[Services],
        limit: Limit = 100,
        cursor: Cursor = None,
    ) -> CohortList:
        """Each cohort's subtree totals (platform admins only: a cohort holds other
        tenants' queues)."""
        await authorize(services.policy, request.user, "admin.live.read")
        summary = await _board(services).current()
        page, next_cursor = _page(sorted(summary.cohorts), cursor, limit)
        items = [CohortOut.of(summary.cohorts[name]) for name in page]
        return CohortList(summary.as_of, summary.source, items, next_cursor)

    @get(
        "/events",
        operation_id="StreamEvents",
        media_type="text/event-stream",
        responses=errors(400, 429),
    )
    async def events(
        self,
        request: Request[Identity, Any, Any],
        services: NamedDependency[Services],
        last_event_id: Annotated[
            str | None, HeaderParameter(name="Last-Event-ID", max_length=64)
        ] = None,
        heartbeat: Annotated[float, Parameter(ge=1, le=60)] = 15.0,
    ) -> Stream:
        """Server-Sent Events: each workload event (``event: submitted``, ``admitted``,
        ``preempted``, ``finished``, ``failed``, ``cancelled``, ...) and each config
        change (``event: config``), with JSON ``data:``; a comment every ``heartbeat``
        seconds. Resumes after ``Last-Event-ID``; without it, starts from now."""
        viewer = await _viewer(services, request.user)
        if last_event_id is not None:
            start = _parse_event_id(last_event_id)
        else:
            async with services.database.session() as session:
                start = await newest_ids(session)
        board = _board(services)
        holder = viewer or ANY_TENANT  # a tenant's streams, or the platform admins'
        slot = services.stream_slots.take(holder)
        if slot is None:
            raise ApiError(
                429,
                "too_many_streams",
                f"{_whose(viewer)} already {services.stream_slots.open(holder)} "
                "event streams open, as many as this gateway allows at once; close one "
                "(another tab of the console, say) and try again",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        closing = asyncio.Event()
        cast(dict[str, Any], request.scope)[CLOSING] = closing
        feed = EventFeed(
            services.database, board, viewer, closing, heartbeat, newest=services.newest_ids
        )
        stream = feed.run(start, slot)
        # A stream never iterated (the client gone before its first byte) never runs its
        # ``finally``: the slot is given back when the generator is collected.
        weakref.finalize(stream, slot.release)
        return Stream(
            stream,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )


async def _viewer(services: Services, identity: Identity) -> str | None:
    """``None`` for a platform admin (sees everything); otherwise the tenant whose admin
    asks. Raises 403 for anyone else."""
    if identity.tenant == ANY_TENANT:
        await authorize(services.policy, identity, "admin.live.read")
        return None
    await authorize(services.policy, identity, "live.read", identity.tenant)
    return identity.tenant


def _whose(viewer: str | None) -> str:
    return "the platform's admins have" if viewer is None else f"tenant {viewer!r} has"


def _board(services: Services) -> LiveBoard:
    if services.live is None:
        raise ApiError(503, "unavailable", "the live state is not running")
    return services.live


def _page(names: Sequence[str], cursor: str | None, limit: int) -> tuple[list[str], str | None]:
    """Up to ``limit`` of ``names`` (sorted) after ``cursor``, and the next cursor."""
    start = 0 if cursor is None else bisect.bisect_right(names, cursor)
    page = list(names[start : start + limit])
    return page, (page[-1] if start + limit < len(names) else None)


def _parse_event_id(value: str) -> tuple[int, int]:
    match = _EVENT_ID.fullmatch(value.strip())
    if match is None:
        raise ApiError(400, "invalid_request", "Last-Event-ID: not an event id this stream sent")
    return int(match[1]), int(match[2])


class _Sequence:
    """The ids of one table, read in order. Ids are taken when a row is written but seen
    when its transaction commits, so a missing id may yet appear: it holds the ids after
    it back for up to ``GAP_WAIT`` seconds (then it is taken for a rollback)."""

    def __init__(self, last: int) -> None:
        self.last = last
        self._gap_since: float | None = None

    def ready(self, ids: Sequence[int], now: float) -> int:
        """How many of ``ids`` (ascending, all above :attr:`last`) may go out now."""
        expected, count = self.last + 1, 0
        for id_ in ids:
            if id_ != expected:
                if self._gap_since is None:
                    self._gap_since = now
                if now - self._gap_since < GAP_WAIT:
                    break
            self._gap_since = None
            expected, count = id_ + 1, count + 1
        return count


@dataclass
class EventFeed:
    """One connection's stream: it reads at most ``BATCH`` rows of each kind per poll
    and sends them before reading more, so a slow client holds back only its own feed
    (and never more than one batch). With ``newest`` (the process's shared reader of
    the newest ids), it reads rows only once those ids have passed its own."""

    database: Database
    board: LiveBoard
    viewer: str | None
    closing: asyncio.Event
    heartbeat: float
    newest: NewestIds | None = None

    async def run(self, start: tuple[int, int], slot: Slot | None = None) -> AsyncIterator[str]:
        """The stream's messages until the client goes; ``slot``: its place among the open
        streams, given back when it ends."""
        try:
            async for message in self._messages(start):
                yield message
        finally:
            if slot is not None:
                slot.release()

    async def _messages(self, start: tuple[int, int]) -> AsyncIterator[str]:
        events, audit = _Sequence(start[0]), _Sequence(start[1])
        yield f"retry: {RETRY_MS}\n\n"
        beat = time.monotonic()
        more = True  # the first poll: at once
        while not self.closing.is_set():
            try:
                if more or await self._news(events, audit):
                    messages, more = await self._poll(events, audit)
                else:
                    messages = []
            except (SQLAlchemyError, OSError):
                yield ": the database is out of reach; reconnect to resume\n\n"
                return
            for message in messages:
                yield message
            if messages:
                beat = time.monotonic()
            elif time.monotonic() - beat >= self.heartbeat:
                yield ": keep-alive\n\n"
                beat = time.monotonic()
            if not more:  # catching up (a resume from long ago): read on at once
                await _pause(self.closing, POLL_SECONDS)

    async def _news(self, events: _Sequence, audit: _Sequence) -> bool:
        """Whether a poll may find rows: always without a shared reader; else once its
        newest ids have passed this feed's (an id held back keeps this feed's behind,
        so it is asked again until taken)."""
        if self.newest is None:
            return True
        newest_event, newest_audit = await self.newest.read()
        return newest_event > events.last or newest_audit > audit.last

    async def _poll(self, events: _Sequence, audit: _Sequence) -> tuple[list[str], bool]:
        """The messages the next rows make, and whether more rows may be waiting."""
        async with self.database.session() as session:
            rows = (
                await session.exec(
                    select(WorkloadEventRow, WorkloadRow.tenant, WorkloadRow.queue)
                    .join(WorkloadRow, col(WorkloadRow.id) == col(WorkloadEventRow.workload_id))
                    .where(col(WorkloadEventRow.id) > events.last)
                    .order_by(col(WorkloadEventRow.id))
                    .limit(BATCH)
                )
            ).all()
            entries = (
                await session.exec(
                    select(AuditEntry)
                    .where(col(AuditEntry.id) > audit.last)
                    .order_by(col(AuditEntry.id))
                    .limit(BATCH)
                )
            ).all()
        now = time.monotonic()
        rows = rows[: events.ready([r[0].id or 0 for r in rows], now)]
        entries = entries[: audit.ready([e.id or 0 for e in entries], now)]
        messages = []
        for event, tenant, queue in rows:
            events.last = event.id or 0
            if self.viewer is None or tenant == self.viewer:
                data = {
                    "workload": event.workload_id,
                    "tenant": tenant,
                    "queue": queue,
                    "attempt": event.attempt,
                    "at": event.at.isoformat(),
                    "detail": event.detail,
                }
                messages.append(_message(event.type, (events.last, audit.last), data))
        mine = await self._my_queues() if entries else frozenset[str]()
        for entry in entries:
            audit.last = entry.id or 0
            if entry.kind in CONFIG_KINDS and self._sees(entry, mine):
                data = {
                    "kind": entry.kind,
                    "name": entry.name,
                    "action": entry.action,
                    "actor": entry.actor,
                    "tenant": entry.tenant,
                    "at": entry.at.isoformat(),
                }
                messages.append(_message("config", (events.last, audit.last), data))
        return messages, BATCH in (len(rows), len(entries))

    async def _my_queues(self) -> frozenset[str]:
        if self.viewer is None:
            return frozenset()
        summary: LiveSummary = await self.board.current()
        return frozenset(summary.queues_of(self.viewer))

    def _sees(self, entry: AuditEntry, mine: frozenset[str]) -> bool:
        if self.viewer is None:
            return True
        return entry.tenant == self.viewer or (entry.kind == "cluster_queue" and entry.name in mine)


def _message(kind: str, ids: tuple[int, int], data: dict[str, Any]) -> str:
    body = msgspec.json.encode(data).decode()
    return f"id: {ids[0]}-{ids[1]}\nevent: {kind}\ndata: {body}\n\n"


async def _pause(closing: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(closing.wait(), timeout=seconds)
    except TimeoutError:
        return
