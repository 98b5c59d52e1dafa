"""The per-object services on SQLite and PostgreSQL: two admins racing on one
version, and the audit entries a change writes, the same as a config apply's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlmodel import col, select

from tenants import Database, parse_config
from tenants.errors import NotFoundError, StaleVersionError
from tenants.models import AuditEntry
from tenants.services import apply_config, export_config
from tenants.services.objects import get_object, put_object
from tests.admin.test_object_api import queue
from tests.gateway.test_workload_api import CONFIG


async def _configured(database: Database) -> None:
    async with database.session() as session:
        await apply_config(session, parse_config(CONFIG), actor="setup")


# PostgreSQL only: SQLite refuses the second writer itself (database is locked), so the
# race this guards against cannot happen there.
@pytest.mark.parametrize("database", ["postgresql"], indirect=True)
async def test_of_two_admins_changing_one_version_at_once_exactly_one_wins(
    database: Database,
) -> None:
    await _configured(database)

    async def change(gpus: int) -> int:
        async with database.session() as session:
            changed = await put_object(
                session, "cluster_queue", "team-a", queue("team-a", gpus), actor="x", expected=1
            )
            await asyncio.sleep(0.2)  # holds the lock while the other waits for it
            return changed.version

    results = await asyncio.gather(change(5), change(6), return_exceptions=True)
    assert sorted(type(r).__name__ for r in results) == ["StaleVersionError", "int"], results
    stale = next(r for r in results if isinstance(r, StaleVersionError))
    assert stale.current == 2
    async with database.session() as session:
        assert (await get_object(session, "cluster_queue", "team-a")).version == 2


async def test_a_change_is_audited_as_an_apply_audits_it(database: Database) -> None:
    await _configured(database)
    async with database.session() as session:
        await put_object(
            session, "cluster_queue", "team-a", queue("team-a", 5), actor="api", expected=1
        )
    config: dict[str, Any] = {
        **CONFIG,
        "cluster_queues": [queue("team-a", 6), CONFIG["cluster_queues"][1]],
    }
    async with database.session() as session:
        await apply_config(session, parse_config(config), actor="file")
        rows = (
            await session.exec(
                select(AuditEntry)
                .where(col(AuditEntry.kind) == "cluster_queue", col(AuditEntry.name) == "team-a")
                .order_by(col(AuditEntry.id))
            )
        ).all()
        version = (await get_object(session, "cluster_queue", "team-a")).version
    by_api, by_file = rows[-2], rows[-1]
    assert (by_api.actor, by_api.action) == ("api", "update")
    assert (by_file.actor, by_file.action) == ("file", "update")
    assert set(by_api.detail) == set(by_file.detail)
    assert by_api.tenant is None and by_file.tenant is None
    assert version == 3


async def test_one_object_read_from_its_row_is_the_exported_entry(database: Database) -> None:
    """Queues, cohorts and models are read one row at a time (not the whole config):
    the same spec and version as the exported config says."""
    config = {
        "flavors": ["h100"],
        "cohorts": [{"name": "org"}, {"name": "research", "parent": "org"}],
        "cluster_queues": [
            {
                "name": "team-a",
                "cohort": "research",
                "resource_groups": [
                    {
                        "resources": ["nvidia.com/gpu"],
                        "flavors": [{"name": "h100", "quotas": {"nvidia.com/gpu": {"nominal": 4}}}],
                    }
                ],
            }
        ],
        "models": [
            {"name": "org/m", "flavor": "h100", "endpoints": [{"base_url": "http://a.b/v1"}]}
        ],
    }
    async with database.session() as session:
        await apply_config(session, parse_config(config), actor="test")
    async with database.session() as session:
        stored = await export_config(session)
        for kind, section in (
            ("cohort", "cohorts"),
            ("cluster_queue", "cluster_queues"),
            ("model", "models"),
        ):
            for entry in stored[section]:
                found = await get_object(session, kind, entry["name"])
                assert found.spec == entry and found.version >= 1
        with pytest.raises(NotFoundError):
            await get_object(session, "cohort", ".")  # the settings row is no cohort
        with pytest.raises(NotFoundError):
            await get_object(session, "cluster_queue", "nope")
