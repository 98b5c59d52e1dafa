"""Kubernetes quantities, parsed exactly into milli-units."""

from __future__ import annotations

import pytest

from quota.resources import QuantityError, format_quantity, parse_quantity

PARSED = {
    "8": 8_000,
    "500m": 500,
    "0.5": 500,
    "2k": 2_000_000,
    "1Gi": 2**30 * 1000,
    "1Ti": 2**40 * 1000,
    "1.5Gi": 3 * 2**29 * 1000,
    "1e3": 1_000_000,
    "1n": 1,  # sub-milli rounds up, like MilliValue()
    "0": 0,
    3: 3_000,
    0.25: 250,
}


@pytest.mark.parametrize(("text", "milli"), PARSED.items(), ids=[str(k) for k in PARSED])
def test_parse(text: object, milli: int) -> None:
    assert parse_quantity(text) == milli


@pytest.mark.parametrize(
    "bad", ["", "ten", "1 Gi", "1GB", "-1", "--1", True, None, [], "1e99", "1Ki5"]
)
def test_refuse(bad: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_sums_are_exact() -> None:
    assert parse_quantity("100m") * 3 == parse_quantity("300m")
    assert parse_quantity("0.1") + parse_quantity("0.2") == parse_quantity("0.3")


@pytest.mark.parametrize(("milli", "text"), [(500, "500m"), (8000, "8"), (2**30 * 1000, "1Gi")])
def test_format(milli: int, text: str) -> None:
    assert format_quantity(milli) == text
