"""Backends declared in the config, built and kept in step with it.

The local backend is always there (built from the settings); every other backend comes
from the stored config's ``backends`` and is rebuilt when its declaration changes.
Secrets come from environment variables the operator allows (``BackendSecretRule``).
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping, Sequence
from typing import TYPE_CHECKING

from gateway.backends.base import Backend
from gateway.backends.kubernetes import (
    KubernetesBackend,
    KubernetesJobSettings,
    Placement,
    load_config,
)
from gateway.backends.ray import RayBackend
from gateway.backends.slurm import SlurmBackend, SlurmJobSettings
from tenants.config_file import (
    LOCAL_BACKEND,
    BackendDoc,
    KubernetesBackendDoc,
    RayBackendDoc,
    SlurmBackendDoc,
)
from tenants.services.config import BackendConfig

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gateway.settings import BackendSecretRule

__all__ = ["BackendRegistry", "refused_secret_variable"]

log = logging.getLogger(__name__)


def refused_secret_variable(backends: Sequence[BackendDoc], rule: BackendSecretRule) -> str | None:
    """What is wrong with the first backend whose ``token_env`` the operator's rule does not
    allow (the field and the rule), or ``None``."""
    for i, backend in enumerate(backends):
        token_env = (
            backend.token_env if isinstance(backend, (SlurmBackendDoc, RayBackendDoc)) else None
        )
        if token_env is not None and not rule.allows(token_env):
            return (
                f"backends[{i}].token_env: {token_env!r} may not be sent to a "
                f"backend: {rule.describe()}"
            )
    return None


class BackendRegistry:
    """Keeps ``backends`` (name -> backend) and ``flavor_backends`` (flavor -> backend name)
    as the config says; both mappings are changed in place, so whoever holds them (the
    dispatcher, the handlers) sees every change."""

    def __init__(
        self,
        backends: MutableMapping[str, Backend],
        flavor_backends: MutableMapping[str, str],
        secret_env: Mapping[str, str],
    ) -> None:
        self.backends = backends
        self.flavor_backends = flavor_backends
        self._secret_env = secret_env
        self._declared: dict[str, BackendDoc] = {}

    async def apply(self, config: BackendConfig) -> None:
        wanted = {doc.name: doc for doc in config.backends if doc.name != LOCAL_BACKEND}
        for name in [n for n in self._declared if self._declared[n] != wanted.get(n)]:
            del self._declared[name]
            backend = self.backends.pop(name, None)
            if backend is not None:
                await backend.close()
        for name, doc in wanted.items():
            if name not in self._declared and isinstance(doc, SlurmBackendDoc):
                self.backends[name] = self._slurm(doc)
                self._declared[name] = doc
                log.info("backend %s: Slurm at %s (%s)", name, doc.url, doc.api_version)
            elif name not in self._declared and isinstance(doc, KubernetesBackendDoc):
                self.backends[name] = kubernetes_backend(doc)
                self._declared[name] = doc
                log.info("backend %s: Kubernetes namespace %s", name, doc.namespace)
            elif name not in self._declared and isinstance(doc, RayBackendDoc):
                self.backends[name] = self._ray(doc)
                self._declared[name] = doc
                log.info("backend %s: Ray at %s", name, doc.url)
        self.flavor_backends.clear()
        self.flavor_backends.update(config.flavor_backends)

    def _slurm(self, doc: SlurmBackendDoc) -> SlurmBackend:
        if doc.user == "root":
            # Every job runs as the token's Slurm user: root there can read anything the
            # nodes hold. Fine for a throwaway test cluster, not for tenants' work.
            log.warning("backend %s: jobs run as root on the Slurm cluster", doc.name)
        token = self._secret_env.get(doc.token_env)
        if not token:
            log.warning(
                "backend %s: %s is not set on this gateway; its workloads wait until it is",
                doc.name,
                doc.token_env,
            )
        return SlurmBackend(
            doc.name,
            doc.url,
            token=token,
            user=doc.user,
            api_version=doc.api_version,
            job_settings=SlurmJobSettings(
                partition=doc.partition,
                account=doc.account,
                output_dir=doc.output_dir,
                launcher=doc.launcher,
            ),
            timeout=doc.timeout_seconds,
        )

    def _ray(self, doc: RayBackendDoc) -> RayBackend:
        token = None
        if doc.token_env is not None:
            token = self._secret_env.get(doc.token_env)
            if not token:
                log.warning(
                    "backend %s: %s is not set on this gateway; its workloads wait until it is",
                    doc.name,
                    doc.token_env,
                )
        return RayBackend(
            doc.name,
            doc.url,
            token=token,
            token_required=doc.token_env is not None,
            timeout=doc.timeout_seconds,
        )


def kubernetes_backend(doc: KubernetesBackendDoc) -> KubernetesBackend:
    """The backend a ``kind: kubernetes`` declaration names; its kubeconfig is read now (a
    file that cannot be read makes its workloads wait, saying why)."""
    settings = KubernetesJobSettings(
        namespace=doc.namespace,
        image=doc.image,
        use_jobset=doc.use_jobset,
        ttl_seconds_after_finished=doc.ttl_seconds_after_finished,
        flavors={
            flavor: Placement(
                dict(p.node_labels),
                tuple(
                    {
                        k: v
                        for k, v in (
                            ("key", t.key),
                            ("operator", t.operator),
                            ("value", t.value),
                            ("effect", t.effect),
                            ("tolerationSeconds", t.toleration_seconds),
                        )
                        if v not in ("", None)
                    }
                    for t in p.tolerations
                ),
            )
            for flavor, p in doc.flavors.items()
        },
    )
    return KubernetesBackend(
        doc.name,
        settings,
        lambda: load_config(doc.kubeconfig, doc.context, doc.in_cluster),
        timeout=doc.timeout_seconds,
    )
