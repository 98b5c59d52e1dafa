"""Drives admission and dispatch in the background: whichever process holds the
leader lock runs the passes; the others keep trying to take over."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from gateway.admission.dispatcher import Dispatcher
from gateway.admission.forecasts import ForecastPass
from gateway.admission.leader import LeaderLock
from gateway.admission.loop import AdmissionLoop, StaleDecisionError
from gateway.admission.snapshot import ChargedLoader
from gateway.admission.state import LiveBoard
from gateway.backends import Backend
from gateway.background import Rounds
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
    ) -> None:
        # A database outage fails every round; it is logged once, not every round.
        self.outage = outage or Outage("database")
        self.lock = LeaderLock(database)
        self.loop = AdmissionLoop(database, charged=charged, board=board)
        self.dispatcher = Dispatcher(database, backends, flavor_backends)
        self.forecasts = ForecastPass(database, interval=estimate_interval, charged=charged)
        self._rounds = Rounds(self.round, interval=interval, name="ignara-admission")

    async def step(self) -> bool:
        """One round as leader, if this process is (or becomes) the leader."""
        if not await self.lock.try_acquire():
            return False
        try:
            await self.loop.run_pass()
        except StaleDecisionError as err:
            log.info("admission pass rolled back, retrying next round: %s", err)
        await self.dispatcher.run_pass()
        if self.forecasts.due():
            await self.forecasts.run()
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
            return
        self.outage.recovered(began)

    async def start(self) -> None:
        self._rounds.start()

    async def stop(self) -> None:
        """Let the round in progress finish (its transaction commits or rolls back
        whole), then give up leadership."""
        await self._rounds.stop()
        await self.lock.release()
