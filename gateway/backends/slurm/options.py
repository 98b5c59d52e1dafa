"""What a workload may ask of Slurm beyond the backend-neutral job (``slurm: {...}`` in
POST /api/v1/workloads): a small allow-list, each option bounded, mapped onto the job
fields of every wire format (``wire.JobRequest``). Anything else is refused by name."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

__all__ = ["SlurmOptions"]

_Word = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class SlurmOptions(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """sbatch's words: ``--constraint``, ``--qos``, ``--exclusive`` (true: whole nodes;
    false is Slurm's default), ``--time-min`` (minutes,
    at most the job's time limit), ``--nice`` (0 and up: lowering one's own priority needs
    no privilege), ``--comment`` (after the gateway's own), ``--reservation``."""

    # Node features with Slurm's operators (& | [ ] * digits), no spaces or shell words.
    constraint: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.,&|\[\]*:()!-]{1,256}$")] | None = None
    qos: _Word | None = None
    exclusive: bool | None = None
    time_min: Annotated[int, Meta(ge=1, le=30 * 24 * 60)] | None = None
    nice: Annotated[int, Meta(ge=0, le=10_000)] | None = None
    # Printable, one line: it is shown by squeue and sacct.
    comment: Annotated[str, Meta(pattern=r"^[ -~]{1,200}$")] | None = None
    reservation: _Word | None = None

    def problem(self, max_runtime_seconds: int) -> tuple[str, str] | None:
        """What does not fit the workload (the option and why), or ``None``."""
        limit = -(-max_runtime_seconds // 60)  # the job's time limit, in whole minutes
        if self.time_min is not None and self.time_min > limit:
            return "time_min", f"{self.time_min} minutes exceeds the time limit ({limit})"
        return None
