"""The garbage collector's young generation: a setting, at least 50 per cluster queue,
and `ignara serve` applies it before it serves (gateway/process.py says why)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gateway.app import create_app
from gateway.cli import _migrate_and_apply, main
from gateway.process import YOUNG_PER_QUEUE, tune_collector
from gateway.services import Services
from gateway.settings import ServerSettings, Settings
from tenants import load_config_file
from tests.support.serve import serving

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "ignara.example.yaml"


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    """The collector as the test found it, put back afterwards (it is the process's)."""
    before = gc.get_threshold()
    try:
        yield before
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def test_the_young_generation_is_set_and_the_older_ones_kept(
    thresholds: tuple[int, int, int],
) -> None:
    tune_collector(12_345)
    assert gc.get_threshold() == (12_345, thresholds[1], thresholds[2])


@pytest.mark.parametrize(
    ("queues", "expected"), [(0, 50_000), (1_000, 50_000), (1_001, 50_050), (10_000, 500_000)]
)
def test_many_queues_raise_the_young_generation(
    thresholds: tuple[int, int, int], queues: int, expected: int
) -> None:
    # What a cycle leaves for the next grows with the queues (gateway/process.py).
    tune_collector(50_000, queues=queues)
    assert gc.get_threshold() == (expected, thresholds[1], thresholds[2])


@pytest.mark.parametrize("threshold", [0, -700])
def test_a_threshold_below_one_is_refused(thresholds: tuple[int, int, int], threshold: int) -> None:
    # gc.set_threshold(0) would switch the collector off: not what a typo should do.
    with pytest.raises(ValueError, match="must be positive"):
        tune_collector(threshold)
    assert gc.get_threshold() == thresholds


def test_the_setting_defaults_to_fifty_thousand_and_reads_the_environment() -> None:
    assert Settings.from_env({}).server.gc_young_threshold == 50_000
    assert ServerSettings().gc_young_threshold == 50_000
    settings = Settings.from_env({"IGNARA_GC_YOUNG_THRESHOLD": "700"})
    assert settings.server.gc_young_threshold == 700


@pytest.mark.parametrize("raw", ["0", "-1", "lots", "1e5"])
def test_a_bad_threshold_in_the_environment_is_refused_by_name(raw: str) -> None:
    with pytest.raises(ValueError, match="IGNARA_GC_YOUNG_THRESHOLD must be a positive whole"):
        Settings.from_env({"IGNARA_GC_YOUNG_THRESHOLD": raw})


def _serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str, threshold: str
) -> list[tuple[tuple[int, int, int], int, Any]]:
    """Run `ignara serve` on a fresh database, uvicorn stubbed: the collector's thresholds
    and freeze count as they stood when it would have started serving, and the app."""
    seen: list[tuple[tuple[int, int, int], int, Any]] = []
    monkeypatch.setattr(
        "uvicorn.run",
        lambda app, **kwargs: seen.append((gc.get_threshold(), gc.get_freeze_count(), app)),
    )
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        main,
        ["serve", *args],
        env={
            "DATABASE_URL": f"sqlite:///{tmp_path / 'ignara.db'}",
            "IGNARA_GC_YOUNG_THRESHOLD": threshold,
            "IGNARA_ADMIN_KEY": "",
        },
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return seen


def test_serve_sets_the_collector_and_freezes_its_start_up_heap_before_serving(
    thresholds: tuple[int, int, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [(threshold, frozen, _)] = _serve(tmp_path, monkeypatch, threshold="4321")
    assert threshold == (4321, thresholds[1], thresholds[2])
    assert frozen > 0


def test_serve_raises_the_collector_for_the_queues_it_is_configured_with(
    thresholds: tuple[int, int, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [(threshold, _, _)] = _serve(tmp_path, monkeypatch, "--config", str(EXAMPLE), threshold="10")
    queues = len(load_config_file(str(EXAMPLE)).cluster_queues)
    assert queues > 0
    assert threshold == (YOUNG_PER_QUEUE * queues, thresholds[1], thresholds[2])


def test_serve_raises_the_collector_again_when_a_config_load_brings_more_queues(
    thresholds: tuple[int, int, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A config grown after start-up: each load tells the app its queue count.
    [(_, _, app)] = _serve(tmp_path, monkeypatch, threshold="4321")
    services: Services = app.state["services"]
    assert services.on_queues is not None
    services.on_queues(2_000)
    assert gc.get_threshold() == (2_000 * YOUNG_PER_QUEUE, thresholds[1], thresholds[2])
    services.on_queues(3)
    assert gc.get_threshold() == (4321, thresholds[1], thresholds[2])


def test_each_config_load_tells_how_many_cluster_queues_it_has(settings: Settings) -> None:
    _migrate_and_apply(settings, str(EXAMPLE))
    queues = len(load_config_file(str(EXAMPLE)).cluster_queues)
    seen: list[int] = []
    app = create_app(settings, on_queues=seen.append)
    services: Services = app.state["services"]

    async def start_then_reload() -> None:
        async with serving(app):
            assert seen == [queues]  # the load at start-up
            await services.reload_config()

    asyncio.run(start_then_reload())
    assert seen == [queues, queues]
