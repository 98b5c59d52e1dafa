"""Idle event streams cost the database nothing of their own: each reads rows only once
the process's shared reader of the newest ids (``gateway.newest_ids``) has passed its
own ids, and that reader reads once per interval for all of them. An event still reaches
every stream."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, cast

import pytest
from sqlalchemy import event

from gateway.admin.live import EventFeed
from gateway.admission.state import LiveBoard
from gateway.newest_ids import NewestIds, newest_ids
from tenants import Database
from tests.admission.test_events import configured, submit

FEEDS = 6


class Statements:
    """The SELECTs of workload event rows (a stream's poll) and of the newest ids."""

    def __init__(self) -> None:
        self.rows = 0
        self.newest = 0

    def __call__(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "FROM workload_events JOIN workloads" in statement:
            self.rows += 1
        elif "max(workload_events.id)" in statement:
            self.newest += 1


@pytest.fixture
def statements(database: Database) -> Iterator[Statements]:
    counted = Statements()
    engine = database.engine.sync_engine
    event.listen(engine, "before_cursor_execute", counted)
    yield counted
    event.remove(engine, "before_cursor_execute", counted)


async def test_idle_streams_read_no_rows_and_an_event_reaches_them_all(
    database: Database, statements: Statements
) -> None:
    await configured(database)
    async with database.session() as session:
        start = await newest_ids(session)
    shared = NewestIds(database, interval=0.2)
    closing = asyncio.Event()
    received: list[list[str]] = [[] for _ in range(FEEDS)]

    async def follow(into: list[str]) -> None:
        feed = EventFeed(
            database, cast(LiveBoard, None), None, closing, heartbeat=60, newest=shared
        )
        async for message in feed.run(start):
            into.append(message)

    tasks = [asyncio.create_task(follow(into)) for into in received]
    await asyncio.sleep(2.0)  # four polling intervals of the streams, nothing happening
    # One poll each when they open, then none: only the shared reader reads, once per
    # interval for all six (however many intervals the loop managed to run).
    assert statements.rows == FEEDS
    assert 1 <= shared.reads <= 2.0 / 0.2 + 1
    assert statements.newest == shared.reads + 1  # and this test's own, for ``start``

    workload = await submit(database, "train")
    async with asyncio.timeout(10):
        while not all(any(workload in m for m in into) for into in received):
            await asyncio.sleep(0.05)
    assert all(any("event: submitted" in m for m in into) for into in received)
    assert statements.rows > FEEDS  # they read rows once there was something to read
    closing.set()
    await asyncio.gather(*tasks)


async def test_the_shared_reader_reads_once_per_interval_however_many_ask(
    database: Database, statements: Statements
) -> None:
    await configured(database)
    now = [0.0]
    shared = NewestIds(database, interval=0.5, clock=lambda: now[0])
    first = await asyncio.gather(*(shared.read() for _ in range(10)))
    assert shared.reads == 1 and len(set(first)) == 1  # single flight
    await submit(database, "train")  # a new event: not seen until the interval is up
    now[0] = 0.4
    assert await shared.read() == first[0] and shared.reads == 1
    now[0] = 0.5
    later = await shared.read()
    assert shared.reads == 2 and later[0] > first[0][0]
    assert statements.newest == 2
