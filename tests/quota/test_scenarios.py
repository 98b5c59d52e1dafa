"""Every scenario file under tests/scenarios, played through `ignara simulate`'s code path."""

from __future__ import annotations

from pathlib import Path

import pytest

from quota.scenario import load_scenario
from quota.simulate import play

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
FILES = sorted(SCENARIOS.rglob("*.yaml"))

pytestmark = pytest.mark.scenario


def test_scenarios_are_present() -> None:
    assert len(FILES) >= 100, f"expected the scenario suite under {SCENARIOS}"


@pytest.mark.parametrize("path", FILES, ids=[str(f.relative_to(SCENARIOS)) for f in FILES])
def test_scenario(path: Path) -> None:
    result = play(load_scenario(path))
    assert result.snapshots, "a scenario without an expect step checks nothing"
    assert result.ok, "\n".join(result.failures)
