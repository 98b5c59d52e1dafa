"""`ignara apply FILE` from the command line."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gateway.cli import _migrate_and_apply, main
from gateway.settings import Settings
from tenants import Database
from tenants.services import export_config

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "ignara.example.yaml"


def apply(path: Path, database: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{database}"}
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "apply", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_apply_twice_then_refuse_a_bad_file(tmp_path: Path) -> None:
    database = tmp_path / "ignara.db"
    first = apply(EXAMPLE, database)
    assert first.returncode == 0, first.stderr
    assert "created flavor h100" in first.stderr
    again = apply(EXAMPLE, database)
    assert again.returncode == 0 and again.stderr.strip().endswith("no changes")
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster_queues: [{name: q, cohort: 3}]\n")
    refused = apply(bad, database)
    assert refused.returncode == 2
    assert "cluster_queues[0].cohort: expected `str | null`, got `int`" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_seed_applies_only_to_an_unconfigured_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make run` seeds the example; restarting it must never undo an admin's change."""
    settings = Settings.from_env({"DATABASE_URL": f"sqlite:///{tmp_path / 'ignara.db'}"})
    _migrate_and_apply(settings, str(EXAMPLE), only_if_unconfigured=True)
    assert "created flavor h100" in capsys.readouterr().err

    # An admin changes the configuration (here: one more flavor).
    changed = yaml.safe_load(EXAMPLE.read_text())
    changed["flavors"].append("l40s")
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(changed))
    _migrate_and_apply(settings, str(edited))
    assert "created flavor l40s" in capsys.readouterr().err

    _migrate_and_apply(settings, str(EXAMPLE), only_if_unconfigured=True)
    said = capsys.readouterr().err
    assert "not applied, the database already holds a configuration" in said
    assert "l40s" in asyncio.run(_flavors(settings))


async def _flavors(settings: Settings) -> list[str]:
    database = Database(settings.database.url)
    try:
        async with database.session() as session:
            exported: list[str] = (await export_config(session))["flavors"]
            return exported
    finally:
        await database.dispose()


def test_serve_refuses_config_and_seed_together(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["serve", "--config", str(EXAMPLE), "--seed", str(EXAMPLE)], catch_exceptions=False
    )
    assert result.exit_code == 2
    assert "--config and --seed exclude each other" in result.output
