"""Usage records leave the hot path at once: :meth:`UsageRecorder.record` appends to a
bounded in-memory buffer, and one background task writes it to SQL in batches.

A failed write keeps its batch (it is retried with back-off); only when the buffer
is full are new records dropped, counted and logged, so a database outage costs
memory up to ``max_pending`` records and never blocks or fails an inference call.
A write that fails because the database is out of reach is told to the database's
:class:`~gateway.outages.Outage` (logged once per outage), any other failure is
logged with its trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

from sqlmodel.ext.asyncio.session import AsyncSession

from gateway.outages import Outage, database_unavailable
from tenants import Database
from tenants.services.usage import UsageRecord, insert_usage

__all__ = ["InsertUsage", "UsageRecorder"]

log = logging.getLogger(__name__)

InsertUsage = Callable[[AsyncSession, Sequence[UsageRecord]], Awaitable[None]]
"""Writes one batch in the given session (its transaction commits after)."""

Written = Callable[[list[str]], Awaitable[None]]
"""Told the reservation ids of each batch once it is written (must not raise)."""

DROP_LOG_INTERVAL = 10.0  # seconds between warnings about dropped records


class UsageRecorder:
    """Buffers usage records and writes them in batches off the request path.

    ``record`` is synchronous and O(1); a batch is written as soon as ``batch_size``
    records wait or ``flush_interval`` seconds have passed. ``stop`` writes all that
    is still pending (retrying for up to ``stop_timeout`` seconds if the database
    fails) before it returns.
    """

    def __init__(
        self,
        database: Database,
        *,
        batch_size: int = 500,
        flush_interval: float = 0.5,
        max_pending: int = 100_000,
        retry_initial: float = 0.1,
        retry_max: float = 10.0,
        stop_timeout: float = 30.0,
        insert: InsertUsage = insert_usage,
        outage: Outage | None = None,
        written: Written | None = None,
    ) -> None:
        if batch_size < 1 or max_pending < batch_size:
            raise ValueError("usage recorder: need 1 <= batch_size <= max_pending")
        if flush_interval <= 0 or retry_initial <= 0 or retry_max < retry_initial:
            raise ValueError("usage recorder: intervals must be positive")
        self._database = database
        self._batch_size = batch_size
        self._flush_interval = flush_interval
        self._max_pending = max_pending
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._stop_timeout = stop_timeout
        self._insert = insert
        self._outage = outage or Outage("database")
        self.written_hook = written
        # Written from the left by the flusher only: record() appends on the right,
        # so the head batch stays put while it is being written.
        self._pending: deque[UsageRecord] = deque()
        self._lock = asyncio.Lock()  # one writer at a time: flush() may race the task
        self._wake = asyncio.Event()  # a full batch waits
        self._stopping = asyncio.Event()
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._deadline = float("inf")  # for retries once stopping (time.monotonic())
        self._dropped = 0
        self._written = 0
        self._failures = 0
        self._last_drop_log = float("-inf")

    # --- the hot path ---------------------------------------------------------------

    def record(self, record: UsageRecord) -> None:
        """Queue ``record`` for writing; never blocks, never raises. Past
        ``max_pending`` waiting records (or after stop) it is dropped and counted."""
        pending = self._pending
        if self._closed or len(pending) >= self._max_pending:
            self._drop()
            return
        pending.append(record)
        if len(pending) >= self._batch_size:
            self._wake.set()

    def _drop(self) -> None:
        self._dropped += 1
        now = time.monotonic()
        if now - self._last_drop_log >= DROP_LOG_INTERVAL:  # a warning, not a log flood
            self._last_drop_log = now
            why = "the recorder is stopped" if self._closed else "the buffer is full"
            log.warning(
                "usage records dropped: %s (%d pending, %d dropped in all)",
                why,
                len(self._pending),
                self._dropped,
            )

    # --- what it has done ---------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Records waiting to be written."""
        return len(self._pending)

    @property
    def dropped(self) -> int:
        """Records given up: the buffer was full, the recorder stopped, or a final
        write at stop kept failing."""
        return self._dropped

    @property
    def written(self) -> int:
        return self._written

    @property
    def failures(self) -> int:
        """Failed batch writes so far (each one retried)."""
        return self._failures

    # --- writing ------------------------------------------------------------------------

    async def flush(self) -> None:
        """Write the records pending now, batch by batch; those that arrive meanwhile
        wait for the next flush (else, under a steady trickle, every write would be
        followed at once by another of the few records made during it: a commit per
        handful of records). Raises what a failed write raised; its batch and all after
        it stay pending."""
        async with self._lock:
            left = len(self._pending)
            while left:
                size = min(left, self._batch_size)
                batch = list(itertools.islice(self._pending, size))
                async with self._database.session() as session:
                    await self._insert(session, batch)
                for _ in range(size):
                    self._pending.popleft()
                self._written += size
                left -= size
                if self.written_hook is not None:
                    ids = [r.reservation for r in batch if r.reservation is not None]
                    if ids:  # the ledger may drop what it kept for these calls
                        await self.written_hook(ids)

    def _backoff(self, failures: int) -> float:
        return float(min(self._retry_max, self._retry_initial * 2 ** min(failures - 1, 30)))

    async def _pause(self, event: asyncio.Event, seconds: float) -> None:
        """Wait ``seconds``, or less if ``event`` is set."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), max(0.0, seconds))

    async def _run(self) -> None:
        """Write batches until stopped and drained; after a failure, retry with
        back-off (once stopping, until the stop deadline passes)."""
        failed = 0
        while True:
            stopping = self._stopping.is_set()
            if not stopping and failed == 0:
                await self._pause(self._wake, self._flush_interval)
                self._wake.clear()
            written = self._written
            began = self._outage.now()
            try:
                await self.flush()
            except Exception as err:  # the top of a background task: log, keep the batch, retry
                failed += 1
                self._failures += 1
                delay = self._backoff(failed)
                if database_unavailable(err):
                    self._outage.failed(err)
                else:
                    log.exception(
                        "cannot write %d usage records (attempt %d); retrying in %.1fs",
                        min(len(self._pending), self._batch_size),
                        failed,
                        delay,
                    )
                if stopping:
                    remaining = self._deadline - time.monotonic()
                    if remaining <= 0:
                        self._closed = True
                        return
                    delay = min(delay, remaining)
                    await asyncio.sleep(delay)
                else:
                    await self._pause(self._stopping, delay)  # stop() retries at once
                continue
            failed = 0
            if self._written != written:  # it wrote, so the database answers
                self._outage.recovered(began)
            if stopping and not self._pending:
                # No await since the check: closing now means no record can slip in
                # between the last write and the close.
                self._closed = True
                return

    # --- life cycle -----------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is not None or self._stopping.is_set():
            raise RuntimeError("usage recorder already started")
        self._task = asyncio.create_task(self._run(), name="ignara-usage-recorder")

    async def stop(self) -> None:
        """Write all pending records, then stop; records after this are dropped. If
        the database keeps failing past ``stop_timeout``, the rest are counted as
        dropped and logged as an error."""
        self._deadline = time.monotonic() + self._stop_timeout
        self._stopping.set()
        task, self._task = self._task, None
        if task is None:  # never started: drain here
            await self._run()
        else:
            await self._await_task(task)
        self._closed = True
        if self._pending:
            lost = len(self._pending)
            self._pending.clear()
            self._dropped += lost
            log.error("usage recorder stopped with %d records unwritten: they are lost", lost)

    async def _await_task(self, task: asyncio.Task[None]) -> None:
        # The running task sees the stop at its next turn; it is cancelled only if a
        # write hangs past the deadline (a cancelled write may leave a batch half known).
        self._wake.set()
        done, _ = await asyncio.wait(
            {task}, timeout=max(0.0, self._deadline - time.monotonic()) + 1
        )
        if not done:
            log.error("usage recorder: a write hung past the stop timeout; cancelling it")
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        elif not task.cancelled() and task.exception() is not None:
            log.error("usage recorder task failed", exc_info=task.exception())
