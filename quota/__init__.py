"""Ignara's quota engine: Kueue's admission semantics as pure domain logic.

Nothing here touches HTTP, SQL or Redis; the gateway wires it to the network.

Usage::

    from quota import QuotaEngine

    engine = QuotaEngine(config)
    engine.add(workload)
    cycle = engine.schedule_once()

Hot classes: those built once or more per nomination (``Blocker``, ``FlavorChoice``,
``PreemptionRequest``, ``Target``, ``DRS``...) write their ``__init__`` out and are not
frozen. The ``__init__`` a dataclass generates stays interpreted Python when
``bench/compile_engine.py`` compiles the module, and a frozen one sets every field
through ``object.__setattr__``: about 3 times the cost of a written-out one in Python,
6 times compiled. Nothing changes them once built.
"""

from quota.cache import AdmittedWorkload
from quota.config import QuotaDocument, parse_quota_config, to_quota_config
from quota.engine import QuotaEngine
from quota.errors import ConfigError, QuotaError, ScenarioError, WorkloadError
from quota.model import (
    Admission,
    ClusterQueueSpec,
    CohortSpec,
    FlavorQuotas,
    PodSet,
    PodSetAssignment,
    PreemptionPolicy,
    QuotaConfig,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from quota.reasons import Blocker, PendingReason, ReasonCode
from quota.resources import FlavorResource, QuantityError, format_quantity, parse_quantity
from quota.scenario import Scenario, load_scenario, parse_scenario
from quota.scheduler import CycleResult, Preemption
from quota.simulate import SimulationResult, play

__all__ = [
    "Admission",
    "AdmittedWorkload",
    "Blocker",
    "ClusterQueueSpec",
    "CohortSpec",
    "ConfigError",
    "CycleResult",
    "FlavorQuotas",
    "FlavorResource",
    "PendingReason",
    "PodSet",
    "PodSetAssignment",
    "Preemption",
    "PreemptionPolicy",
    "QuantityError",
    "QuotaConfig",
    "QuotaDocument",
    "QuotaEngine",
    "QuotaError",
    "ReasonCode",
    "ResourceGroup",
    "ResourceQuota",
    "Scenario",
    "ScenarioError",
    "SimulationResult",
    "Workload",
    "WorkloadError",
    "format_quantity",
    "load_scenario",
    "parse_quantity",
    "parse_quota_config",
    "parse_scenario",
    "play",
    "to_quota_config",
]
