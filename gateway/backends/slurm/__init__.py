"""The Slurm backend: slurmrestd's REST API, with wire shapes kept per API version.

Modules: ``wire`` (the shapes of each API version), ``errors`` (Slurm's refusals as
backend errors), ``client`` (async HTTP), ``mapping`` (job <-> Slurm job, pure) and
``backend`` (the :class:`~gateway.backends.base.Backend` implementation).
"""

from gateway.backends.slurm.backend import SlurmBackend
from gateway.backends.slurm.mapping import SlurmJobSettings
from gateway.backends.slurm.wire import WIRE_FORMATS

__all__ = ["WIRE_FORMATS", "SlurmBackend", "SlurmJobSettings"]
