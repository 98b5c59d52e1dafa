"""The leader's forecast of estimated starts, in a process of its own (as it runs on
PostgreSQL, where it would otherwise hold the GIL against the event loop for seconds):
the same starts written as in this process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from sqlmodel import select

from gateway.admission import AdmissionLoop
from gateway.admission.forecasts import ForecastPass
from tenants import Database, parse_config
from tenants.models import WorkloadRow
from tenants.services import apply_config
from tenants.services.charges import charged_hours
from tests.admin.test_live import CONFIG, job, submit
from tests.support.processes import alive, ended_within


async def _starts(database: Database) -> dict[str, object]:
    async with database.session() as session:
        rows = (await session.exec(select(WorkloadRow))).all()
    return {row.id: row.estimated_start for row in rows if row.state == "pending"}


async def test_a_separate_forecast_writes_the_starts_this_process_would(
    database: Database,
) -> None:
    async with database.session() as session:
        await apply_config(session, parse_config(CONFIG), actor="test")
    await submit(database, "alpha", job("runs", "team-a", 8))
    waiting = [await submit(database, "alpha", job(f"waits-{i}", "team-a", 4)) for i in range(3)]
    await AdmissionLoop(database).run_pass()

    separate = ForecastPass(database, charged=charged_hours, separate=True)
    try:
        elsewhere = await separate.run()
    finally:
        separate.close()
    written = await _starts(database)
    assert sorted(elsewhere) == sorted(waiting) == sorted(written)
    assert all(written[w] is not None for w in waiting)  # an hour from now, and on

    here = await ForecastPass(database, charged=charged_hours).run_here()
    assert here == elsewhere


_ORPHAN_SCRIPT = """
import os, sys, time
from gateway.admission.forecasts import ForecastPass
from tenants import Database

forecasts = ForecastPass(Database(sys.argv[1]), separate=True)
print(forecasts._pool().submit(os.getpid).result(timeout=60), flush=True)
time.sleep(600)
"""


def test_the_forecast_process_of_a_killed_gateway_does_not_live_on(tmp_path: Path) -> None:
    """A gateway killed outright never shuts its forecast pool down: the pool's process
    must notice and end, not stay behind as an orphan."""
    gateway = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN_SCRIPT, f"sqlite:///{tmp_path / 'ignara.db'}"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert gateway.stdout is not None
        worker = int(gateway.stdout.readline())
        assert worker != gateway.pid and alive(worker)
    finally:
        gateway.kill()
        gateway.wait(timeout=10)
    outlived = not ended_within(worker, 15)
    if outlived:
        os.kill(worker, signal.SIGKILL)  # not left behind by the test either
    assert not outlived, f"the forecast process {worker} outlived its gateway"
