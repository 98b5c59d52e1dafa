"""The Ray backend: a Ray cluster's Jobs REST API (``/api/jobs/`` on the dashboard).

Modules: ``client`` (async HTTP, Ray's plain-text refusals as backend errors), ``mapping``
(job <-> Ray job, pure) and ``backend`` (the :class:`~gateway.backends.base.Backend`
implementation, which also keeps stopping jobs Ray would start after a stop).
"""

from gateway.backends.ray.backend import RayBackend

__all__ = ["RayBackend"]
