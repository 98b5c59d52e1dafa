"""The settings of gateways' leases in the shared ledger: how long a lease lasts, how
often the live gateways look for dead ones' calls."""

from __future__ import annotations

import pytest

from gateway.settings import Settings


def test_leases_default_to_seconds_and_are_set_from_the_environment() -> None:
    defaults = Settings.from_env({}).inference
    assert (defaults.lease_seconds, defaults.reclaim_interval) == (10.0, 5.0)
    short = Settings.from_env({"IGNARA_LEASE_SECONDS": "1", "IGNARA_RECLAIM_INTERVAL": "0.5"})
    assert (short.inference.lease_seconds, short.inference.reclaim_interval) == (1.0, 0.5)


@pytest.mark.parametrize("name", ["IGNARA_LEASE_SECONDS", "IGNARA_RECLAIM_INTERVAL"])
@pytest.mark.parametrize("value", ["0", "-2", "soon", "inf"])
def test_a_bad_value_is_refused_by_name(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        Settings.from_env({name: value})
