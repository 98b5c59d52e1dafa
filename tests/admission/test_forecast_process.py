"""The leader's forecast of estimated starts, in a process of its own (as it runs on
PostgreSQL, where it would otherwise hold the GIL against the event loop for seconds):
the same starts written as in this process."""

from __future__ import annotations

from sqlmodel import select

from gateway.admission import AdmissionLoop
from gateway.admission.forecasts import ForecastPass
from tenants import Database, parse_config
from tenants.models import WorkloadRow
from tenants.services import apply_config
from tenants.services.charges import charged_hours
from tests.admin.test_live import CONFIG, job, submit


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
