"""`ignara report`: the chargeback report from the database as a table, CSV or JSON,
grouped as asked, with a progress bar over many charges; bad options exit 2."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

import gateway.cli
from gateway.cli import main
from tenants import Database
from tenants.services.charges import insert_charges
from tenants.services.usage import insert_usage
from tests.usage.test_charges_api import CONFIG, GPU_HOURS, call, run


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    url = f"sqlite:///{tmp_path / 'ignara.db'}"
    config = tmp_path / "ignara.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    environment = {"DATABASE_URL": url, "IGNARA_LOCAL_BACKEND_ROOT": str(tmp_path / "jobs")}
    assert ignara(environment, "apply", str(config)).exit_code == 0

    async def write() -> None:
        database = Database(url)
        try:
            async with database.session() as session:
                await insert_charges(
                    session,
                    [
                        run("alpha", "team-a", "h100", date(2026, 11, 2), "16", "w1"),
                        run("alpha", "team-a2", "a100", date(2026, 11, 9), "1.5", "w3"),
                        run("beta", "team-b", "h100", date(2026, 11, 3), "2", "w6"),
                        run("beta", "team-b", "h100", date(2026, 12, 3), "99", "w7"),
                    ],
                )
                await insert_usage(
                    session, [call("alpha", "team-a", date(2026, 11, 2), 1_000_000, 250_000, 1)]
                )
        finally:
            await database.dispose()

    asyncio.run(write())
    return environment


def ignara(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


def test_a_months_table_grouped_by_tenant(env: dict[str, str]) -> None:
    result = ignara(env, "report", "--month", "2026-11", "--group-by", "tenant")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "period",
        "tenant",
        "resource",
        "amount",
        "money",
        "currency",
        "unpriced",
    ]
    rows = [line.split() for line in lines[2:] if not line.startswith("-")]
    assert rows == [
        ["2026-11-01", "alpha", "input-tokens", "1000000", "0.20", "USD"],
        ["2026-11-01", "alpha", GPU_HOURS, "17.5", "40.00", "USD", "yes"],  # a100 is unpriced
        ["2026-11-01", "alpha", "output-tokens", "250000", "0.20", "USD"],
        ["2026-11-01", "beta", GPU_HOURS, "2", "5.00", "USD"],
        ["total", "input-tokens", "1000000", "0.20", "USD"],
        ["total", GPU_HOURS, "19.5", "45.00", "USD", "yes"],
        ["total", "output-tokens", "250000", "0.20", "USD"],
    ]


def test_csv_and_json_say_the_same(env: dict[str, str]) -> None:
    common = ["report", "--month", "2026-11", "--per", "week", "--group-by", "queue,flavor"]
    as_csv = ignara(env, *common, "--format", "csv")
    assert as_csv.exit_code == 0, as_csv.output
    table = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    gpu = [
        (r["period"], r["queue"], r["flavor"], r["amount"], r["money"])
        for r in table
        if r["resource"] == GPU_HOURS
    ]
    assert gpu == [
        ("2026-11-02", "team-a", "h100", "16", "40.00"),
        ("2026-11-02", "team-b", "h100", "2", "5.00"),
        ("2026-11-09", "team-a2", "a100", "1.5", ""),
    ]
    as_json = ignara(env, *common, "--format", "json")
    assert as_json.exit_code == 0, as_json.output
    body: dict[str, Any] = json.loads(as_json.stdout)
    assert (body["tenant"], body["per"], body["currency"]) == (None, "week", "USD")
    assert body["totals"]["amounts"][GPU_HOURS] == "19.5"
    assert len(body["rows"]) == 4  # team-a's GPU-hours and tokens apart (two flavors)


def test_one_tenant_and_a_progress_bar_over_many_charges(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gateway.cli, "PROGRESS_CHARGES", 0)
    result = ignara(env, "report", "--month", "2026-11", "--tenant", "beta", "--format", "csv")
    assert result.exit_code == 0, result.output
    assert "reading 1 charges" in result.stderr
    assert [r["amount"] for r in csv.DictReader(io.StringIO(result.stdout))] == ["2"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--month", "2026-13"], "month"),
        (["--month", "2026-11", "--start", "2026-11-01"], "either --month"),
        (["--start", "2026-11-01"], "both --start and --end"),
        (["--start", "2026-11-01", "--end", "2028-11-01"], "366 days"),
        (["--start", "yesterday", "--end", "2026-11-01"], "isoformat"),
        (["--group-by", "colour"], "group_by"),
        (["--per", "year"], "year"),
        (["--format", "xml"], "xml"),
    ],
)
def test_bad_options_exit_2(env: dict[str, str], args: list[str], message: str) -> None:
    result = ignara(env, "report", *args)
    assert result.exit_code == 2 and message in result.output, result.output


def test_amounts_are_exact_in_sqlite_too(env: dict[str, str]) -> None:
    """SQLite keeps NUMERIC as a double; many small amounts still add up exactly."""

    async def write() -> None:
        database = Database(env["DATABASE_URL"])
        try:
            async with database.session() as session:
                await insert_charges(
                    session,
                    [
                        run("gamma", "team-b", "h100", date(2026, 11, 5), "0.1", f"x{i}")
                        for i in range(1000)
                    ]
                    + [run("gamma", "team-b", "h100", date(2026, 11, 5), "123456789.000001", "y")],
                )
        finally:
            await database.dispose()

    asyncio.run(write())
    result = ignara(env, "report", "--month", "2026-11", "--tenant", "gamma", "--format", "json")
    body = json.loads(result.stdout)
    assert body["totals"]["amounts"] == {GPU_HOURS: str(Decimal("123456889.000001"))}
