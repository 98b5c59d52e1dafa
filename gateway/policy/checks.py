"""Checks on what callers ask an engine, shared by the backends."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

__all__ = ["decision_ref", "json_input"]

_REF = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def decision_ref(path: str) -> str:
    """Spell a decision's path the one way: dotted, without ``data.``.

    ``ignara/authz/decision``, ``/ignara/authz/decision``, ``ignara.authz.decision``
    and ``data.ignara.authz.decision`` all give ``ignara.authz.decision``.
    Only plain identifiers are accepted, so callers cannot smuggle a query in.

    Raises:
        ValueError: the path is not a sequence of identifiers.
    """
    ref = path.strip("/").replace("/", ".")
    if ref.startswith("data."):
        ref = ref.removeprefix("data.")
    if not _REF.fullmatch(ref):
        raise ValueError(f"policy path {path!r} is not a dotted or slashed rule path")
    return ref


def json_input(value: Mapping[str, object]) -> dict[str, object]:
    """A plain-dict copy of an input document, checked to be JSON.

    Raises:
        ValueError: the input holds values JSON cannot carry (or nests too deep).
    """
    try:
        text = json.dumps(value if isinstance(value, dict) else dict(value), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"policy input is not a JSON object: {exc}") from exc
    loaded: dict[str, object] = json.loads(text)
    return loaded
