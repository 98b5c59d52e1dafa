"""Resource vocabulary: exact Kubernetes quantities and flavor-resource keys.

Every amount is an integer count of milli-units (``"500m"`` cpu is 500, ``"1Gi"``
memory is 1073741824000), so sums and comparisons are exact. Sub-milli amounts
round up, as Kubernetes' ``MilliValue()`` does.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import NamedTuple

__all__ = [
    "MILLI",
    "FlavorResource",
    "QuantityError",
    "format_quantity",
    "parse_quantity",
]

MILLI = 1000

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<dec>[numkMGTPE]?))$"
)
# Quantities beyond this are certainly typos, and would make arithmetic slow.
_MAX_MILLI = 2**100


class QuantityError(ValueError):
    """A quantity string that Kubernetes would not accept."""


class FlavorResource(NamedTuple):
    """One resource in one flavor: the unit in which quota is held."""

    flavor: str
    resource: str


def parse_quantity(value: object) -> int:
    """Parse a Kubernetes quantity (``8``, ``"500m"``, ``"2k"``, ``"1Gi"``) to milli-units.

    Negative quantities are rejected: nothing in a quota or a request may be
    negative. Booleans and floats that are not whole milli-units are refused
    rather than guessed at.
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        amount = Fraction(value)
    elif isinstance(value, float):
        amount = Fraction(str(value))
    elif isinstance(value, str):
        amount = _parse_string(value.strip())
    else:
        raise QuantityError(f"{value!r} is not a quantity")
    if amount < 0:
        raise QuantityError(f"{value!r} is negative")
    milli = amount * MILLI
    whole = -(-milli.numerator // milli.denominator)  # round up, like MilliValue()
    if whole > _MAX_MILLI:
        raise QuantityError(f"{value!r} is too large")
    return whole


def _parse_string(text: str) -> Fraction:
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(f"{text!r} is not a quantity (e.g. 8, 500m, 2k, 1Gi)")
    number = Fraction(match["num"])
    if match["bin"]:
        return number * _BINARY[match["bin"]]
    if match["exp"]:
        exponent = int(match["exp"][1:])
        if abs(exponent) > 30:
            raise QuantityError(f"{text!r} has an absurd exponent")
        return number * Fraction(10) ** exponent
    return number * _DECIMAL[match["dec"] or ""]


def format_quantity(milli: int) -> str:
    """Render milli-units back as a short quantity string (``500m``, ``4``, ``1Gi``)."""
    if milli % MILLI:
        return f"{milli}m"
    units = milli // MILLI
    for suffix, factor in sorted(_BINARY.items(), key=lambda item: -item[1]):
        if units >= factor and units % factor == 0:
            return f"{units // factor}{suffix}"
    return str(units)
