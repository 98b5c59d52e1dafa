"""The queue preview decides on the admission leader's last snapshot only while
nothing in it has changed since; then its answer is the one a fresh read gives."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from gateway.admin.queues import _replaced, preview_change
from gateway.admission import AdmissionRuntime
from gateway.admission.changes import read_marker
from gateway.admission.snapshot import read_snapshot
from gateway.admission.state import LiveBoard
from tenants import Database, parse_config
from tenants.services import apply_config, export_config
from tests.admin.test_live import CONFIG, job, submit


async def test_the_leaders_snapshot_serves_while_nothing_changed(
    database: Database,
) -> None:
    async with database.session() as session:
        await apply_config(session, parse_config(CONFIG), actor="test")
    await submit(database, "alpha", job("runs", "team-a", 4))
    waits = await submit(database, "alpha", job("waits", "team-a", 8))  # fits with 8 more
    board = LiveBoard(database)
    runtime = AdmissionRuntime(database, {}, board=board)

    async def nothing() -> None:  # admitted work stays admitted: no job to run or end
        return None

    runtime.dispatcher.run_pass = nothing  # type: ignore[assignment,method-assign]
    try:
        for _ in range(3):  # the admission, then a pass that finds nothing new
            assert await runtime.step()
        kept = board.snapshot_as_of(await read_marker(database))
        assert kept is not None and kept is runtime.loop.last_snapshot

        async with database.snapshot() as session:
            stored = await export_config(session)
        spec = dict(CONFIG["cluster_queues"][0])
        spec["resource_groups"] = [
            {
                "resources": ["nvidia.com/gpu", "nvidia.com/gpu-hours"],
                "flavors": [
                    {
                        "name": "h100",
                        "quotas": {
                            "nvidia.com/gpu": {"nominal": 12},
                            "nvidia.com/gpu-hours": {"nominal": 100},
                        },
                    }
                ],
            }
        ]
        changed = _replaced(stored, "team-a", spec)
        fresh = await read_snapshot(database)
        now = datetime.now(UTC)
        # settled: the unchanged pass is known to do nothing, and is not run again
        reused = preview_change(
            dataclasses.replace(kept, now=now), changed, "team-a", 1, settled=True
        )
        read = preview_change(dataclasses.replace(fresh, now=now), changed, "team-a", 1)
        assert [c.id for c in reused.admitted] == [c.id for c in read.admitted] == [waits]
        assert reused.admitted[0].because_of_change and read.admitted[0].because_of_change
        assert (reused.preempted_count, reused.still_pending) == (0, 0)
        assert (read.preempted_count, read.still_pending) == (0, 0)

        await submit(database, "beta", job("new", "team-b", 1))  # a change: not reused
        assert board.snapshot_as_of(await read_marker(database)) is None
    finally:
        await runtime.stop()
