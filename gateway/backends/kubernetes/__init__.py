"""The Kubernetes backend: indexed Jobs and JobSets through the Kubernetes API (lightkube).

Modules: ``mapping`` (job <-> manifests and statuses, pure), ``client`` (the API calls and
their errors), ``watch`` (list + watch to follow the gateway's objects) and ``backend``
(the :class:`~gateway.backends.base.Backend` implementation).
"""

from gateway.backends.kubernetes.backend import KubernetesBackend
from gateway.backends.kubernetes.client import load_config
from gateway.backends.kubernetes.mapping import KubernetesJobSettings, Placement

__all__ = ["KubernetesBackend", "KubernetesJobSettings", "Placement", "load_config"]
