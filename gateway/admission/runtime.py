"""Drives admission and dispatch in the background: whichever process holds the
leader lock runs the passes; the others keep trying to take over."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from gateway.admission.changes import Marker, read_marker
from gateway.admission.dispatcher import Dispatcher
from gateway.admission.forecasts import ForecastPass
from gateway.admission.leader import LeaderLock
from gateway.admission.loop import AdmissionLoop, StaleDecisionError
from gateway.admission.snapshot import ChargedLoader
from gateway.admission.state import LiveBoard
from gateway.backends import Backend
from gateway.background import Rounds
from gateway.observability import Observability
from gateway.outages import Outage, database_unavailable
from tenants import Database

__all__ = ["AdmissionRuntime"]

log = logging.getLogger(__name__)


class AdmissionRuntime:
    def __init__(
        self,
        database: Database,
        backends: Mapping[str, Backend],
        *,
        interval: float = 0.5,
        flavor_backends: Mapping[str, str] | None = None,
        outage: Outage | None = None,
        charged: ChargedLoader | None = None,
        estimate_interval: float = 5.0,
        board: LiveBoard | None = None,
        observe: Observability | None = None,
        idle_pass_interval: float = 30.0,
        idle_estimate_interval: float = 120.0,
        max_lost_runs: int = 5,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.observe = observe or Observability()
        # A database outage fails every round; it is logged once, not every round.
        self.outage = outage or Outage("database")
        self.lock = LeaderLock(database)
        self.loop = AdmissionLoop(database, charged=charged, board=board, observe=self.observe)
        self.dispatcher = Dispatcher(
            database, backends, flavor_backends, observe=self.observe, max_lost_runs=max_lost_runs
        )
        # PostgreSQL (the gateway at size): the forecast runs in a process of its own;
        # a SQLite file (one small gateway, the tests): in a thread.
        separate = database.url.startswith("postgresql")
        self.forecasts = ForecastPass(
            database, interval=estimate_interval, charged=charged, separate=separate
        )
        self._rounds = Rounds(self.round, interval=interval, name="ignara-admission")
        self._was_leading = False
        self.board = board
        # A pass (and a forecast) runs when what they read changed, and, however quiet
        # the gateway, at least this often (time alone moves budgets and estimates).
        self.idle_pass_interval = idle_pass_interval
        self.idle_estimate_interval = idle_estimate_interval
        self._monotonic = monotonic
        self._passed: tuple[Marker, float] | None = None  # as of the last committed pass
        self._forecast: tuple[Marker, float] | None = None  # as of the last forecast
        self.skipped = 0  # passes skipped as idle, for tests and the curious

    async def step(self) -> bool:
        """One round as leader, if this process is (or becomes) the leader."""
        leading = await self.lock.try_acquire()
        self._leading(leading)
        if not leading:
            return False
        metrics = self.observe.metrics
        # Read before the pass: a change landing while it runs is seen by the next one.
        marker = await read_marker(self.loop.database)
        now = self._monotonic()
        if _unchanged(self._passed, marker, now, self.idle_pass_interval):
            self.skipped += 1
            if self.board is not None:
                self.board.keep()  # the last pass's state is still the state
        else:
            began = time.perf_counter()
            try:
                with self.observe.span("admission.pass"):
                    await self.loop.run_pass()
                self._passed = (marker, now)
                if self.board is not None and self.loop.last_snapshot is not None:
                    self.board.remember(self.loop.last_snapshot, marker)
            except StaleDecisionError as err:
                log.info("admission pass rolled back, retrying next round: %s", err)
            if metrics is not None:
                metrics.admission_cycle.observe(time.perf_counter() - began)
        await self.dispatcher.run_pass()
        if self.forecasts.due() and not _unchanged(
            self._forecast, marker, now, self.idle_estimate_interval
        ):
            await self.forecasts.run()
            self._forecast = (marker, now)
        return True

    async def round(self) -> None:
        """:meth:`step`, and whatever goes wrong in it logged, never raised."""
        began = self.outage.now()
        try:
            await self.step()
        except Exception as err:  # the top of a background task: log, never die
            # A round that fails for any reason must not end admission for good (the
            # lock would stay held by a process that no longer admits): say why, give
            # the lock up so any replica may lead, and try again.
            if database_unavailable(err):
                self.outage.failed(err)
            else:
                log.exception("admission round failed; releasing leadership and retrying")
            await self.lock.release()
            self._leading(False)
            return
        self.outage.recovered(began)

    def _leading(self, now: bool) -> None:
        """Say when this process takes or loses the admission loop."""
        if not now:
            # A leader that comes back decides afresh: another may have led meanwhile.
            self._passed = self._forecast = None
        if now == self._was_leading:
            return
        self._was_leading = now
        self.observe.events.info("admission.leader", leader=now)
        if self.observe.metrics is not None:
            self.observe.metrics.leader.set(1 if now else 0)

    async def start(self) -> None:
        self._rounds.start()

    async def stop(self) -> None:
        """Let the round in progress finish (its transaction commits or rolls back
        whole), then give up leadership."""
        await self._rounds.stop()
        self.forecasts.close()
        await self.lock.release()
        self._leading(False)


def _unchanged(last: tuple[Marker, float] | None, marker: Marker, now: float, most: float) -> bool:
    """Whether the work done at ``last`` still stands: nothing it read changed since, and
    it is at most ``most`` seconds old."""
    return last is not None and last[0] == marker and now - last[1] < most
