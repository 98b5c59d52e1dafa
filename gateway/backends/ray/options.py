"""What a workload may ask of Ray beyond the backend-neutral job (``ray: {...}`` in
POST /api/v1/workloads): pieces of the Jobs API's submission that Ray reads as they are
(``runtime_env``'s ``pip``, ``working_dir`` and ``py_modules``, ``entrypoint_resources``,
``metadata``), each bounded. Anything else is refused by name.

What the gateway owns stays its own: the entrypoint's GPUs, CPUs and memory come from the
gang's admitted requests (``entrypoint_resources`` may not name ``CPU``, ``GPU``,
``memory`` or ``object_store_memory``: that would run past the quota), ``env_vars`` from the
job's ``env``, and the ``ignara.*`` metadata from the workload.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

__all__ = ["RESERVED_RESOURCES", "RayOptions"]

# Ray's own resources: the gang's requests set them (entrypoint_num_*), never a section.
RESERVED_RESOURCES = frozenset({"CPU", "GPU", "memory", "object_store_memory"})

# A package the Ray cluster fetches (remote: nothing of the gateway's machine is sent).
_Uri = Annotated[str, Meta(pattern=r"^(https|s3|gs|gcs)://[!-~]{1,2000}$")]
# One requirement line of pip's (a name, extras, versions, markers, a URL after @), never
# an option: a line starting with "-" (--index-url ...) is refused.
_Requirement = Annotated[
    str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._\[\],<>=!~;:'\"@/+ -]{0,199}$")
]
_ResourceName = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.:/-]{1,128}$")]
_MetadataKey = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.:/-]{1,64}$")]


class RayOptions(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``pip`` (requirement lines Ray installs for the job), ``working_dir`` and
    ``py_modules`` (remote packages: https, s3, gs or gcs URIs), ``entrypoint_resources``
    (custom resources, e.g. ``{"accelerator_type:H100": 1}``), ``metadata`` (shown by Ray
    next to the gateway's own ``ignara.*`` keys)."""

    pip: Annotated[list[_Requirement], Meta(max_length=64)] | None = None
    working_dir: _Uri | None = None
    py_modules: Annotated[list[_Uri], Meta(max_length=16)] | None = None
    entrypoint_resources: (
        Annotated[
            dict[_ResourceName, Annotated[float, Meta(gt=0, le=1_000_000)]], Meta(max_length=16)
        ]
        | None
    ) = None
    metadata: (
        Annotated[dict[_MetadataKey, Annotated[str, Meta(max_length=256)]], Meta(max_length=16)]
        | None
    ) = None

    def problem(self, _max_runtime_seconds: int) -> tuple[str, str] | None:
        """What the gateway keeps for itself (the option and why), or ``None``."""
        for name in sorted(self.entrypoint_resources or {}):
            if name in RESERVED_RESOURCES:
                return (
                    f"entrypoint_resources.{name}",
                    "set by the gang's requests (its pods' GPUs, CPUs and memory), not here",
                )
        for key in sorted(self.metadata or {}):
            if key.startswith("ignara."):
                return f"metadata.{key}", "the ignara.* keys are the gateway's own"
        return None

    def runtime_env(self) -> dict[str, object]:
        """The runtime_env pieces asked for (``env_vars`` is the job's)."""
        pieces: dict[str, object] = {
            "pip": list(self.pip) if self.pip is not None else None,
            "working_dir": self.working_dir,
            "py_modules": list(self.py_modules) if self.py_modules is not None else None,
        }
        return {k: v for k, v in pieces.items() if v is not None}
