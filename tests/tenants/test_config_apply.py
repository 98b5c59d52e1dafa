"""`ignara apply`: the declarative config lands in SQL idempotently, on SQLite and
PostgreSQL, audited, and never strands admitted work."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlmodel import func, select

from quota.errors import ConfigError
from tenants import ConflictError, Database, parse_config
from tenants.models import AuditEntry, Tenant, WorkloadRow
from tenants.services import apply_config, load_quota_config

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "ignara.example.yaml"


def example() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return data


async def audit_count(db: Database) -> int:
    async with db.session() as session:
        return (await session.exec(select(func.count()).select_from(AuditEntry))).one()


async def test_apply_creates_everything_and_the_engine_reads_it_back(database: Database) -> None:
    config = parse_config(example())
    async with database.session() as session:
        report = await apply_config(session, config, actor="test")
    assert "cluster_queue research-vision" in report.created
    assert "tenant vision" in report.created
    async with database.session() as session:
        stored = await load_quota_config(session)
        vision = await session.get(Tenant, "vision")
    assert stored == config.quota_config()
    assert vision is not None and vision.queues == ["research-vision"]


async def test_applying_the_same_file_twice_changes_nothing(database: Database) -> None:
    config = parse_config(example())
    async with database.session() as session:
        await apply_config(session, config, actor="test")
    before = await audit_count(database)
    async with database.session() as session:
        report = await apply_config(session, config, actor="test")
    assert not report.changed and report.summary() == "no changes"
    assert await audit_count(database) == before


async def test_a_changed_quota_is_updated_and_audited(database: Database) -> None:
    async with database.session() as session:
        await apply_config(session, parse_config(example()), actor="test")
    data = example()
    quotas = data["cluster_queues"][0]["resource_groups"][0]["flavors"][0]["quotas"]
    quotas["nvidia.com/gpu"]["nominal"] = 12
    async with database.session() as session:
        report = await apply_config(session, parse_config(data), actor="alice")
    assert report.updated == ["cluster_queue research-vision"]
    async with database.session() as session:
        entry = (await session.exec(select(AuditEntry).where(AuditEntry.actor == "alice"))).one()
        stored = await load_quota_config(session)
    assert (entry.action, entry.kind, entry.name) == ("update", "cluster_queue", "research-vision")
    vision = next(q for q in stored.cluster_queues if q.name == "research-vision")
    assert vision.resource_groups[0].flavors[0].quotas["nvidia.com/gpu"].nominal == 12_000


async def test_removing_a_queue_with_admitted_work_is_refused(database: Database) -> None:
    async with database.session() as session:
        await apply_config(session, parse_config(example()), actor="test")
    async with database.session() as session:
        session.add(WorkloadRow(tenant="platform", name="etl", queue="prod-batch", state="running"))
    data = example()
    data["cluster_queues"] = [q for q in data["cluster_queues"] if q["name"] != "prod-batch"]
    data["tenants"] = [t for t in data["tenants"] if t["name"] != "platform"]
    with pytest.raises(ConflictError, match="'prod-batch' holds admitted work \\(etl\\)"):
        async with database.session() as session:
            await apply_config(session, parse_config(data), actor="test")
    async with database.session() as session:  # nothing half-written
        assert any(
            q.name == "prod-batch" for q in (await load_quota_config(session)).cluster_queues
        )


async def test_removing_an_idle_queue_deletes_it(database: Database) -> None:
    async with database.session() as session:
        await apply_config(session, parse_config(example()), actor="test")
    data = example()
    data["cluster_queues"] = [q for q in data["cluster_queues"] if q["name"] != "prod-batch"]
    data["tenants"] = [t for t in data["tenants"] if t["name"] != "platform"]
    async with database.session() as session:
        report = await apply_config(session, parse_config(data), actor="test")
    assert report.deleted == ["cluster_queue prod-batch", "tenant platform"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["tenants"][0].update(queues=["nope"]), "tenants[0].queues[0]: unknown"),
        (lambda d: d["flavors"].append("H100!"), "flavors[3]: 'H100!' is not a valid name"),
        (lambda d: d.update(extra=1), "object contains unknown field `extra`"),
        (
            lambda d: d["cluster_queues"][0]["resource_groups"][0]["flavors"][0]["quotas"][
                "cpu"
            ].update(nominal="lots"),
            "nominal: 'lots' is not a quantity",
        ),
    ],
)
def test_invalid_config_names_the_field(change: Any, message: str) -> None:
    data = copy.deepcopy(example())
    change(data)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_config(data)


async def test_migrations_are_idempotent(database: Database) -> None:
    await database.migrate()  # already at head: a no-op
    async with database.session() as session:
        assert (await session.exec(select(func.count()).select_from(Tenant))).one() == 0


async def test_prices_are_applied_audited_and_exported_as_written(database: Database) -> None:
    from decimal import Decimal

    from tenants.services import export_config
    from tenants.services.config import load_prices

    data = example()
    async with database.session() as session:
        await apply_config(session, parse_config(data), actor="test")
        prices = await load_prices(session)
    assert prices.currency == "USD"
    assert prices.rates[("h100", "nvidia.com/gpu-hours")] == Decimal("2.5")
    assert prices.money("h100", "nvidia.com/gpu-hours", Decimal(16)) == Decimal(40)
    assert prices.money("llama-pool", "output-tokens", Decimal(2_000_000)) == Decimal("1.2")
    assert prices.money("a100", "input-tokens", Decimal(5)) is None  # unpriced
    data["prices"]["flavors"]["h100"]["nvidia.com/gpu-hours"] = "2.75"
    async with database.session() as session:
        report = await apply_config(session, parse_config(data), actor="test")
    assert report.updated == ["setting prices"]
    async with database.session() as session:
        entry = (await session.exec(select(AuditEntry).where(AuditEntry.name == "prices"))).one()
        exported = await export_config(session)
    assert entry.detail["prices"]["flavors"]["h100"] == {"nvidia.com/gpu-hours": "2.75"}
    async with database.session() as session:
        again = await apply_config(session, parse_config(exported), actor="test")
    assert not again.changed
    del data["prices"]
    async with database.session() as session:
        await apply_config(session, parse_config(data), actor="test")
        assert (await load_prices(session)).rates == {}


@pytest.mark.parametrize(
    ("prices", "message"),
    [
        ({"flavors": {"h200": {"nvidia.com/gpu-hours": 1}}}, "prices.flavors.h200: unknown flavor"),
        ({"flavors": {"h100": {"nvidia.com/gpu": 1}}}, "not a charged resource"),
        ({"flavors": {"h100": {"input-tokens": -1}}}, "a price is from 0 to"),
        ({"flavors": {"h100": {"input-tokens": "NaN"}}}, "a price is from 0 to"),
        ({"flavors": {"h100": {"input-tokens": "0.0000001"}}}, "at most 6 decimals"),
        ({"flavors": {"h100": {"input-tokens": "cheap"}}}, "'cheap' is not a number"),
        ({"currency": "dollars"}, "prices.currency"),
        ({"rates": {}}, "unknown field `rates`"),
    ],
)
def test_bad_prices_name_the_field(prices: dict[str, Any], message: str) -> None:
    data = copy.deepcopy(example())
    data["prices"] = prices
    with pytest.raises(ConfigError, match=message):
        parse_config(data)
