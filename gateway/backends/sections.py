"""Backend-specific sections of a workload (``slurm: {...}``, ``ray: {...}``,
``kubernetes: {...}``): each one's options, checked before anything is persisted, and
which backends a section is for.

To add one: a strict ``msgspec.Struct`` of its options, an entry in ``SECTIONS`` (the key
is the section's name in the request and in the stored spec's ``options``) and a field of
that name on ``WorkloadIn``; the backend reads its options from ``JobSpec.options``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from gateway.backends.base import Backend
from gateway.backends.kubernetes import KubernetesBackend
from gateway.backends.kubernetes.options import KubernetesOptions
from gateway.backends.ray import RayBackend
from gateway.backends.ray.options import RayOptions
from gateway.backends.slurm import SlurmBackend
from gateway.backends.slurm.options import SlurmOptions

__all__ = ["SECTIONS", "Section", "SectionError", "check_sections"]


@dataclass(frozen=True)
class Section:
    options: type[msgspec.Struct]
    serves: Callable[[Backend], bool]  # whether a backend runs jobs this section is for
    # What in the options does not fit the workload's max runtime: (option, why) or None.
    problem: Callable[[Any, int], tuple[str, str] | None] = lambda _options, _runtime: None


SECTIONS: dict[str, Section] = {
    "slurm": Section(
        SlurmOptions,
        lambda backend: isinstance(backend, SlurmBackend),
        lambda options, runtime: options.problem(runtime),
    ),
    "ray": Section(
        RayOptions,
        lambda backend: isinstance(backend, RayBackend),
        lambda options, runtime: options.problem(runtime),
    ),
    "kubernetes": Section(
        KubernetesOptions,
        lambda backend: isinstance(backend, KubernetesBackend),
        lambda options, runtime: options.problem(runtime),
    ),
}


class SectionError(ValueError):
    """A section is wrong; ``field`` names where (``slurm.qos``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def check_sections(
    given: Mapping[str, Mapping[str, Any] | None],
    candidates: list[Backend],
    max_runtime_seconds: int,
) -> dict[str, dict[str, Any]]:
    """The sections as they are stored (validated; options not given left out), or
    ``SectionError``: an unknown or ill-typed option, or a section for a backend none of
    ``candidates`` (where the workload may run) is."""
    checked: dict[str, dict[str, Any]] = {}
    for name, body in given.items():
        if body is None:
            continue
        section = SECTIONS[name]
        try:
            options = msgspec.convert(body, section.options)
        except msgspec.ValidationError as err:
            raise SectionError(*_where(name, str(err))) from None
        if not any(section.serves(backend) for backend in candidates):
            raise SectionError(name, f"this workload does not run on a {name} backend")
        if (problem := section.problem(options, max_runtime_seconds)) is not None:
            raise SectionError(f"{name}.{problem[0]}", problem[1])
        checked[name] = {k: v for k, v in msgspec.to_builtins(options).items() if v is not None}
    return checked


def _where(name: str, message: str) -> tuple[str, str]:
    """msgspec says ``... - at `$.qos```, ``... - at `key` in `$.labels``` or ``unknown
    field `qos```: the field's full name."""
    said, _, key_in = message.partition(" - at `key` in `$")
    if key_in:
        return f"{name}{key_in.rstrip('`')}", f"a key: {said}"
    said, _, at = message.partition(" - at `$")
    if at:
        return f"{name}{at.rstrip('`')}", said
    if said.startswith("Object contains unknown field `"):
        field = said.removeprefix("Object contains unknown field `").rstrip("`")
        return f"{name}.{field}", "not an option this gateway passes on"
    return name, said
