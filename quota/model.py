"""The quota vocabulary as frozen values: flavors, queues, cohorts, workloads.

These types say *what is configured* and *what is asked for*; the live state
(usage, admissions) lives in :mod:`quota.cache`. Amounts are milli-units
(see :mod:`quota.resources`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction

from quota.periods import BudgetPeriod
from quota.resources import FlavorResource

__all__ = [
    "Admission",
    "BorrowWithinCohortPolicy",
    "ClusterQueueSpec",
    "CohortSpec",
    "FlavorFungibility",
    "FlavorQuotas",
    "PodSet",
    "PodSetAssignment",
    "PreemptionPolicy",
    "QueueingStrategy",
    "QuotaConfig",
    "ReclaimWithinCohort",
    "ResourceGroup",
    "ResourceQuota",
    "WhenCanBorrow",
    "WhenCanPreempt",
    "WithinClusterQueue",
    "Workload",
]


class QueueingStrategy(StrEnum):
    STRICT_FIFO = "StrictFIFO"
    BEST_EFFORT_FIFO = "BestEffortFIFO"


class WithinClusterQueue(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class ReclaimWithinCohort(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class BorrowWithinCohortPolicy(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class WhenCanBorrow(StrEnum):
    """Kueue's ``MayStopSearch`` is spelled ``Borrow`` here, as in v1beta1."""

    BORROW = "Borrow"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class WhenCanPreempt(StrEnum):
    """Kueue's ``MayStopSearch`` is spelled ``Preempt`` here, as in v1beta1."""

    PREEMPT = "Preempt"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """Quota for one resource in one flavor; ``None`` limits mean unlimited."""

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class FlavorQuotas:
    name: str
    quotas: Mapping[str, ResourceQuota]


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    """Resources that must take their flavor together, and the flavors to try in order."""

    resources: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


def iter_quotas(
    groups: tuple[ResourceGroup, ...],
) -> Iterator[tuple[FlavorResource, ResourceQuota]]:
    for group in groups:
        for flavor in group.flavors:
            for resource, quota in flavor.quotas.items():
                yield FlavorResource(flavor.name, resource), quota


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    within_cluster_queue: WithinClusterQueue = WithinClusterQueue.NEVER
    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    borrow_within_cohort: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER
    max_priority_threshold: int | None = None


@dataclass(frozen=True, slots=True)
class FlavorFungibility:
    when_can_borrow: WhenCanBorrow = WhenCanBorrow.BORROW
    when_can_preempt: WhenCanPreempt = WhenCanPreempt.TRY_NEXT_FLAVOR


@dataclass(frozen=True, slots=True)
class ClusterQueueSpec:
    name: str
    cohort: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    preemption: PreemptionPolicy = field(default_factory=PreemptionPolicy)
    flavor_fungibility: FlavorFungibility = field(default_factory=FlavorFungibility)
    fair_weight: Fraction = Fraction(1)
    stopped: bool = False
    # Seconds; the max runtime of a workload that gives none, for GPU-hour budgets.
    default_max_runtime: Fraction | None = None


@dataclass(frozen=True, slots=True)
class CohortSpec:
    name: str
    parent: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    fair_weight: Fraction = Fraction(1)


@dataclass(frozen=True, slots=True)
class QuotaConfig:
    """A whole quota configuration: what ``flavors``/``cohorts``/``cluster_queues`` say."""

    flavors: tuple[str, ...] = ()
    cohorts: tuple[CohortSpec, ...] = ()
    cluster_queues: tuple[ClusterQueueSpec, ...] = ()
    fair_sharing: bool = False
    budget_period: BudgetPeriod = BudgetPeriod.MONTH


@dataclass(frozen=True, slots=True)
class PodSet:
    """``count`` identical pods, each asking for ``requests`` (milli-units by resource)."""

    name: str
    count: int
    requests: Mapping[str, int]
    min_count: int | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    """A gang: every pod set is admitted together or not at all."""

    name: str
    cluster_queue: str
    pod_sets: tuple[PodSet, ...]
    priority: int = 0
    created: float = 0.0
    max_runtime: Fraction | None = None  # seconds; what a GPU-hour budget commits
    # When it was last preempted and put back in its queue. Kueue orders an evicted
    # workload by its eviction time, not its creation: ordered by creation, a victim
    # comes back ahead of its preemptor, takes the room it freed, and is preempted
    # again, for ever.
    queued: float | None = None

    @property
    def order_time(self) -> float:
        """Kueue's queue-order timestamp: the last eviction, else the creation."""
        return self.created if self.queued is None else self.queued


@dataclass(frozen=True, slots=True)
class PodSetAssignment:
    name: str
    count: int
    flavors: Mapping[str, str]  # resource -> flavor


@dataclass(frozen=True, slots=True)
class Admission:
    """Where a workload holds quota: its queue, and per pod set a count and flavors."""

    cluster_queue: str
    pod_sets: tuple[PodSetAssignment, ...]

    def usage(self, workload: Workload) -> dict[FlavorResource, int]:
        """Quota held: per-pod requests times admitted counts, by flavor and resource."""
        requests = {pod_set.name: pod_set.requests for pod_set in workload.pod_sets}
        total: dict[FlavorResource, int] = {}
        for assigned in self.pod_sets:
            for resource, flavor in assigned.flavors.items():
                # A zero amount still names the flavor-resource the workload uses.
                amount = requests[assigned.name].get(resource, 0) * assigned.count
                key = FlavorResource(flavor, resource)
                total[key] = total.get(key, 0) + amount
        return total
