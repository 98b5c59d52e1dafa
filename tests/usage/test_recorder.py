"""The usage recorder: a non-blocking append on the hot path, batched writes off it,
retries that keep the batch, a bounded buffer, and nothing lost on stop."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from sqlalchemy import func
from sqlmodel import select
from sqlmodel.ext.asyncio.session import AsyncSession

from gateway.usage import UsageRecord, UsageRecorder
from tenants import Database
from tenants.models import UsageRecordRow
from tenants.services.usage import insert_usage
from tests.tenants.test_usage_service import count_inserts

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)


def usage(n: int = 0) -> UsageRecord:
    return UsageRecord(
        tenant="alpha",
        principal="alpha-bot",
        queue="alpha-q",
        model="llama-3-8b",
        flavor="llama-pool",
        status=200,
        prompt_tokens=n,
        completion_tokens=1,
        created_at=NOW,
    )


async def stored(database: Database) -> int:
    async with database.session() as session:
        count: int = (await session.exec(select(func.count()).select_from(UsageRecordRow))).one()
    return count


async def eventually_stored(database: Database, count: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while (found := await stored(database)) != count:
        assert time.monotonic() < deadline, f"{found} rows stored, expected {count}"
        await asyncio.sleep(0.02)


class FailingFirst:
    """An insert that fails its first ``times`` calls, as a database outage would."""

    def __init__(self, times: int = 1) -> None:
        self.times = times
        self.calls = 0

    async def __call__(self, session: AsyncSession, records: Sequence[UsageRecord]) -> None:
        self.calls += 1
        if self.calls <= self.times:
            raise ConnectionError("database unavailable")
        await insert_usage(session, records)


async def test_records_are_written_in_batches(database: Database) -> None:
    recorder = UsageRecorder(database, batch_size=100, flush_interval=60)
    with count_inserts(database) as inserts:
        for i in range(1000):
            recorder.record(usage(i))
        assert recorder.pending == 1000  # nothing written on the hot path
        await recorder.flush()
    assert (len(inserts), recorder.pending, recorder.written) == (10, 0, 1000)
    assert await stored(database) == 1000
    async with database.session() as session:
        tokens = (await session.exec(select(func.sum(UsageRecordRow.prompt_tokens)))).one()
    assert tokens == sum(range(1000))  # every record once: none repeated, none lost


async def test_a_full_batch_is_written_at_once_and_the_rest_after_the_interval(
    database: Database,
) -> None:
    recorder = UsageRecorder(database, batch_size=50, flush_interval=0.3)
    await recorder.start()
    try:
        for i in range(120):
            recorder.record(usage(i))
        await eventually_stored(database, 120, timeout=5)
        recorder.record(usage())  # alone: written when the interval passes
        await eventually_stored(database, 121, timeout=5)
    finally:
        await recorder.stop()
    assert (recorder.written, recorder.dropped, recorder.failures) == (121, 0, 0)


async def test_records_made_during_a_write_wait_for_the_next_interval(
    database: Database,
) -> None:
    """A steady trickle (a record every 5 ms, writes that take 20 ms) is written once
    per interval, not in a write after every write, each with the few records that
    came during the one before."""
    writes = 0

    async def slow_insert(session: AsyncSession, records: Sequence[UsageRecord]) -> None:
        nonlocal writes
        writes += 1
        await asyncio.sleep(0.02)
        await insert_usage(session, records)

    recorder = UsageRecorder(database, batch_size=1000, flush_interval=0.2, insert=slow_insert)
    await recorder.start()
    try:
        for i in range(120):  # 0.6 s or more
            recorder.record(usage(i))
            await asyncio.sleep(0.005)
    finally:
        await recorder.stop()
    assert (await stored(database), recorder.dropped) == (120, 0)
    assert writes <= 6, writes  # one per interval, and the last at stop


async def test_stop_writes_everything_pending_and_later_records_are_dropped(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = UsageRecorder(database, batch_size=1000, flush_interval=3600)
    await recorder.start()
    for i in range(250):
        recorder.record(usage(i))
    await recorder.stop()
    assert await stored(database) == 250
    with caplog.at_level(logging.WARNING, logger="gateway.usage.recorder"):
        recorder.record(usage())
    assert (recorder.dropped, recorder.pending) == (1, 0)
    assert "the recorder is stopped" in caplog.text


async def test_records_arriving_while_stop_drains_are_written_too(database: Database) -> None:
    recorder: UsageRecorder

    async def insert_while_calls_finish(
        session: AsyncSession, records: Sequence[UsageRecord]
    ) -> None:
        await insert_usage(session, records)
        if recorder.written < 30:  # calls still in flight during shutdown record more
            for i in range(10):
                recorder.record(usage(i))

    recorder = UsageRecorder(
        database, batch_size=10, flush_interval=3600, insert=insert_while_calls_finish
    )
    await recorder.start()
    for i in range(10):
        recorder.record(usage(i))
    await recorder.stop()
    assert (await stored(database), recorder.dropped, recorder.pending) == (40, 0, 0)


async def test_stop_without_start_still_writes(database: Database) -> None:
    recorder = UsageRecorder(database)
    recorder.record(usage())
    await recorder.stop()
    assert await stored(database) == 1


async def test_a_failed_write_is_logged_and_its_batch_retried(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    insert = FailingFirst(times=2)
    recorder = UsageRecorder(
        database, batch_size=10, flush_interval=0.05, retry_initial=0.05, insert=insert
    )
    caplog.set_level(logging.ERROR, logger="gateway.usage.recorder")
    await recorder.start()
    try:
        for i in range(25):
            recorder.record(usage(i))
        await eventually_stored(database, 25)
    finally:
        await recorder.stop()
    assert (recorder.failures, recorder.written, recorder.dropped) == (2, 25, 0)
    failures = [r for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(failures) == 2
    assert all(r.exc_info and r.exc_info[0] is ConnectionError for r in failures)


async def test_stop_retries_a_failing_write_before_giving_up(database: Database) -> None:
    recorder = UsageRecorder(database, retry_initial=0.05, insert=FailingFirst(times=3))
    await recorder.start()
    recorder.record(usage())
    await recorder.stop()  # the first attempts fail; stop keeps trying
    assert (await stored(database), recorder.dropped) == (1, 0)


async def test_records_still_unwritten_at_the_stop_deadline_are_counted_lost(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = UsageRecorder(
        database, retry_initial=0.05, stop_timeout=0.3, insert=FailingFirst(times=10**6)
    )
    await recorder.start()
    for i in range(7):
        recorder.record(usage(i))
    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="gateway.usage.recorder"):
        await recorder.stop()
    assert time.monotonic() - started < 3
    assert (recorder.dropped, recorder.pending, await stored(database)) == (7, 0, 0)
    assert "7 records unwritten" in caplog.text


async def test_past_the_bound_records_are_dropped_and_counted(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = UsageRecorder(database, batch_size=5, max_pending=10)
    with caplog.at_level(logging.WARNING, logger="gateway.usage.recorder"):
        for i in range(25):
            recorder.record(usage(i))
    assert (recorder.pending, recorder.dropped) == (10, 15)
    warnings = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert len(warnings) == 1  # rate-limited: no warning per record
    assert "the buffer is full" in warnings[0].getMessage()
    await recorder.stop()
    assert await stored(database) == 10  # the ten it kept


def test_record_is_a_plain_call_that_needs_no_event_loop() -> None:
    recorder = UsageRecorder(Database("sqlite://"), batch_size=1)
    recorder.record(usage())  # synchronous: a full batch only wakes the writer
    assert recorder.pending == 1


def test_settings_are_checked() -> None:
    database = Database("sqlite://")
    with pytest.raises(ValueError):
        UsageRecorder(database, batch_size=0)
    with pytest.raises(ValueError):
        UsageRecorder(database, batch_size=10, max_pending=5)
    with pytest.raises(ValueError):
        UsageRecorder(database, flush_interval=0)


async def test_a_reservation_is_recorded_once_and_the_ledger_told_when_written(
    database: Database,
) -> None:
    """After a crash, the call's own gateway and the one that reclaimed it may both
    record it: the reservation id is unique, so only the first record stays. Once a
    batch is written, the ledger is told which reservations it may drop."""
    told: list[list[str]] = []

    async def written(ids: list[str]) -> None:
        told.append(ids)

    recorder = UsageRecorder(database, written=written)
    first = dataclasses.replace(usage(5), reservation="e1.1")
    again = dataclasses.replace(usage(9), reservation="e1.1", estimated=True)
    recorder.record(first)
    recorder.record(usage(1))  # no reservation: an in-process ledger's call
    recorder.record(dataclasses.replace(usage(2), reservation="e1.2", estimated=True))
    await recorder.flush()
    recorder.record(again)
    await recorder.flush()
    assert told == [["e1.1", "e1.2"], ["e1.1"]]
    async with database.session() as session:
        rows = (await session.exec(select(UsageRecordRow))).all()
    found = sorted((r.reservation or "", r.prompt_tokens, r.estimated) for r in rows)
    assert found == [("", 1, False), ("e1.1", 5, False), ("e1.2", 2, True)]
