"""What the ``/v1`` routes read on every call, rebuilt whenever the config moves:
the model registry, each tenant's queues, the inference settings, and what was
already worked out under this config: the policy decisions (the policies' data
changes only with it) and each queue's limits and static headers (the quota tree's
does too: the ledger takes the new config together with a new catalog)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import msgspec

from gateway.inference.errors import RegistryError
from gateway.inference.ratelimits import QueueQuota
from gateway.inference.registry import ModelRegistry, ModelRoute
from gateway.policy import Decision
from gateway.settings import UpstreamKeyRule
from tenants.config_file import InferenceDoc, ModelDoc

__all__ = ["Catalog", "build_registry", "refused_key_variable"]

log = logging.getLogger(__name__)


@dataclass
class Catalog:
    registry: ModelRegistry = field(default_factory=ModelRegistry)
    tenant_queues: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    settings: InferenceDoc = field(default_factory=InferenceDoc)
    # Decisions keyed by everything the policy input holds; only the policy's own
    # answers are kept (an engine failure is asked again next time).
    decisions: dict[tuple[object, ...], Decision] = field(default_factory=dict)
    # (queue, flavor) -> its quota, for queues that exist and the policy let a call spend
    quotas: dict[tuple[str, str], QueueQuota] = field(default_factory=dict)
    max_wait: dict[str, float] = field(init=False)  # queue -> seconds a call may wait
    # Every queue some tenant may use: decisions about other names (a caller's
    # X-Ignara-Queue may say anything) are not kept, so they cannot grow `decisions`.
    assigned_queues: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.max_wait = {wait.queue: wait.max_wait_seconds for wait in self.settings.waiting}
        self.assigned_queues = frozenset(q for qs in self.tenant_queues.values() for q in qs)

    def route(self, model: str) -> ModelRoute | None:
        return self.registry.route(model)


def build_registry(models: Iterable[ModelDoc], environ: Mapping[str, str]) -> ModelRegistry:
    """The registry of every model that can be served here; a model whose key variable
    is missing on this gateway is left out (and logged) rather than failing them all."""
    routes: list[ModelRoute] = []
    for model in models:
        try:
            routes.extend(
                ModelRegistry.from_config([msgspec.to_builtins(model)], environ=environ).routes()
            )
        except RegistryError as err:
            log.error("model %r is not served by this gateway: %s", model.name, err)
    return ModelRegistry(routes)


def refused_key_variable(models: Iterable[ModelDoc], rule: UpstreamKeyRule) -> str | None:
    """What is wrong with the first endpoint whose ``api_key_env`` the operator's rule
    does not allow (the field and the rule), or ``None``."""
    for i, model in enumerate(models):
        for j, endpoint in enumerate(model.endpoints):
            name = endpoint.api_key_env
            if name is not None and not rule.allows(name):
                return (
                    f"models[{i}].endpoints[{j}].api_key_env: {name!r} may not be sent "
                    f"upstream: {rule.describe()}"
                )
    return None
