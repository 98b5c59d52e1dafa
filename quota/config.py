"""The quota configuration document (``flavors``, ``cohorts``, ``cluster_queues``).

The same vocabulary serves admission scenarios and the gateway's ``ignara.yaml``.
Decoding is strict: unknown fields, wrong types, bad quantities, unknown
flavors and a resource in two groups of one queue are refused with a
:class:`~quota.errors.ConfigError` whose message starts with the field's path.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from typing import Any, TypeVar

import msgspec

from quota.budgets import DurationError, is_budget, metered, parse_duration
from quota.errors import ConfigError
from quota.model import (
    BorrowWithinCohortPolicy,
    ClusterQueueSpec,
    CohortSpec,
    FlavorFungibility,
    FlavorQuotas,
    PreemptionPolicy,
    QueueingStrategy,
    QuotaConfig,
    ReclaimWithinCohort,
    ResourceGroup,
    ResourceQuota,
    WhenCanBorrow,
    WhenCanPreempt,
    WithinClusterQueue,
)
from quota.periods import BudgetPeriod
from quota.resources import QuantityError, parse_quantity

__all__ = [
    "ClusterQueueDoc",
    "CohortDoc",
    "QuotaDocument",
    "decode",
    "duration_at",
    "parse_quota_config",
    "parse_weight",
    "quantity_at",
    "to_quota_config",
]

Quantity = str | int | float
Duration = str | int | float
T = TypeVar("T")


class _Doc(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    pass


class QuotaDoc(_Doc):
    nominal: Quantity
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


class FlavorQuotasDoc(_Doc):
    name: str
    quotas: dict[str, QuotaDoc] = {}


class ResourceGroupDoc(_Doc):
    resources: list[str]
    flavors: list[FlavorQuotasDoc]


class BorrowWithinCohortDoc(_Doc):
    policy: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER
    max_priority_threshold: int | None = None


class PreemptionDoc(_Doc):
    within_cluster_queue: WithinClusterQueue = WithinClusterQueue.NEVER
    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    borrow_within_cohort: BorrowWithinCohortDoc | None = None


class FlavorFungibilityDoc(_Doc):
    when_can_borrow: WhenCanBorrow = WhenCanBorrow.BORROW
    when_can_preempt: WhenCanPreempt = WhenCanPreempt.TRY_NEXT_FLAVOR


class CohortDoc(_Doc):
    name: str
    parent: str | None = None
    resource_groups: list[ResourceGroupDoc] = []
    fair_weight: Quantity = 1


class ClusterQueueDoc(_Doc):
    name: str
    cohort: str | None = None
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    resource_groups: list[ResourceGroupDoc] = []
    preemption: PreemptionDoc | None = None
    flavor_fungibility: FlavorFungibilityDoc | None = None
    fair_weight: Quantity = 1
    stopped: bool = False
    default_max_runtime: Duration | None = None


class QuotaDocument(_Doc):
    flavors: list[str] = []
    cohorts: list[CohortDoc] = []
    cluster_queues: list[ClusterQueueDoc] = []
    fair_sharing: bool = False
    budget_period: BudgetPeriod = BudgetPeriod.MONTH


def decode(data: Any, doc_type: type[T], error: type[ConfigError] = ConfigError) -> T:
    """Convert parsed YAML/JSON into ``doc_type``, naming the bad field on failure."""
    try:
        return msgspec.convert(data, doc_type, strict=True)
    except msgspec.ValidationError as err:
        message, _, where = str(err).partition(" - at `")
        path = where.rstrip("`").removeprefix("$").lstrip(".") or "(top level)"
        raise error(f"{path}: {message[:1].lower()}{message[1:]}") from None


def quantity_at(path: str, value: Quantity, error: type[ConfigError] = ConfigError) -> int:
    try:
        return parse_quantity(value)
    except QuantityError as err:
        raise error(f"{path}: {err}") from None


def duration_at(path: str, value: Duration, error: type[ConfigError] = ConfigError) -> Fraction:
    try:
        return parse_duration(value)
    except DurationError as err:
        raise error(f"{path}: {err}") from None


def parse_weight(path: str, value: Quantity, error: type[ConfigError] = ConfigError) -> Fraction:
    try:
        weight = Fraction(str(value).strip())
    except (ValueError, ZeroDivisionError):
        raise error(f"{path}: {value!r} is not a number") from None
    if weight < 0:
        raise error(f"{path}: fair_weight must not be negative")
    return weight


def parse_quota_config(data: Any) -> QuotaConfig:
    """Check parsed YAML/JSON (``flavors``, ``cohorts``, ``cluster_queues``,
    ``fair_sharing``) and build a :class:`QuotaConfig`; raises :class:`ConfigError`."""
    if not isinstance(data, dict):
        raise ConfigError("(top level): a quota configuration is a mapping")
    return to_quota_config(decode(data, QuotaDocument))


def to_quota_config(doc: QuotaDocument, error: type[ConfigError] = ConfigError) -> QuotaConfig:
    """Check a decoded document and build the immutable :class:`QuotaConfig`."""
    flavors = set(doc.flavors)
    _unique("flavors", doc.flavors, error)
    _unique("cohorts", (c.name for c in doc.cohorts), error)
    _unique("cluster_queues", (q.name for q in doc.cluster_queues), error)
    cohorts = tuple(
        CohortSpec(
            name=c.name,
            parent=c.parent,
            resource_groups=_groups(f"cohorts[{i}]", c.resource_groups, flavors, error),
            fair_weight=parse_weight(f"cohorts[{i}].fair_weight", c.fair_weight, error),
        )
        for i, c in enumerate(doc.cohorts)
    )
    _check_acyclic(cohorts, error)
    queues = tuple(_cluster_queue(i, q, flavors, error) for i, q in enumerate(doc.cluster_queues))
    return QuotaConfig(
        flavors=tuple(doc.flavors),
        cohorts=cohorts,
        cluster_queues=queues,
        fair_sharing=doc.fair_sharing,
        budget_period=doc.budget_period,
    )


def _cluster_queue(
    index: int, doc: ClusterQueueDoc, flavors: set[str], error: type[ConfigError]
) -> ClusterQueueSpec:
    path = f"cluster_queues[{index}]"
    preemption = doc.preemption or PreemptionDoc()
    borrow = preemption.borrow_within_cohort or BorrowWithinCohortDoc()
    fungibility = doc.flavor_fungibility or FlavorFungibilityDoc()
    return ClusterQueueSpec(
        name=doc.name,
        cohort=doc.cohort,
        resource_groups=_groups(path, doc.resource_groups, flavors, error),
        queueing_strategy=doc.queueing_strategy,
        preemption=PreemptionPolicy(
            within_cluster_queue=preemption.within_cluster_queue,
            reclaim_within_cohort=preemption.reclaim_within_cohort,
            borrow_within_cohort=borrow.policy,
            max_priority_threshold=borrow.max_priority_threshold,
        ),
        flavor_fungibility=FlavorFungibility(
            when_can_borrow=fungibility.when_can_borrow,
            when_can_preempt=fungibility.when_can_preempt,
        ),
        fair_weight=parse_weight(f"{path}.fair_weight", doc.fair_weight, error),
        stopped=doc.stopped,
        default_max_runtime=(
            None
            if doc.default_max_runtime is None
            else duration_at(f"{path}.default_max_runtime", doc.default_max_runtime, error)
        ),
    )


def _groups(
    path: str, docs: list[ResourceGroupDoc], flavors: set[str], error: type[ConfigError]
) -> tuple[ResourceGroup, ...]:
    seen_resources: dict[str, int] = {}
    groups = []
    for g, group in enumerate(docs):
        gpath = f"{path}.resource_groups[{g}]"
        if not group.resources:
            raise error(f"{gpath}.resources: a resource group needs at least one resource")
        for resource in group.resources:
            if resource in seen_resources:
                raise error(
                    f"{gpath}.resources: {resource!r} is already in "
                    f"resource_groups[{seen_resources[resource]}]; a resource may be in one group"
                )
            seen_resources[resource] = g
        for resource in group.resources:
            if is_budget(resource) and metered(resource) not in group.resources:
                raise error(
                    f"{gpath}.resources: budget resource {resource!r} must be in the same"
                    f" group as the resource it meters, {metered(resource)!r}"
                )
        _unique(f"{gpath}.flavors", (f.name for f in group.flavors), error)
        groups.append(
            ResourceGroup(
                resources=tuple(group.resources),
                flavors=tuple(
                    _flavor_quotas(f"{gpath}.flavors[{f}]", fq, group.resources, flavors, error)
                    for f, fq in enumerate(group.flavors)
                ),
            )
        )
    return tuple(groups)


def _flavor_quotas(
    path: str,
    doc: FlavorQuotasDoc,
    resources: list[str],
    flavors: set[str],
    error: type[ConfigError],
) -> FlavorQuotas:
    if doc.name not in flavors:
        raise error(f"{path}.name: unknown flavor {doc.name!r} (not in flavors)")
    quotas = {}
    for resource, quota in doc.quotas.items():
        qpath = f"{path}.quotas[{resource!r}]"
        if resource not in resources:
            raise error(f"{qpath}: resource {resource!r} is not in this group's resources")
        quotas[resource] = ResourceQuota(
            nominal=quantity_at(f"{qpath}.nominal", quota.nominal, error),
            borrowing_limit=_optional(f"{qpath}.borrowing_limit", quota.borrowing_limit, error),
            lending_limit=_optional(f"{qpath}.lending_limit", quota.lending_limit, error),
        )
    # A resource a flavor does not mention has no quota in it (nominal 0); a budget
    # must be said, since an unsaid one would quietly forbid every metered request.
    for resource in resources:
        if is_budget(resource) and resource not in quotas:
            raise error(f"{path}.quotas: no quota for budget resource {resource!r}")
        quotas.setdefault(resource, ResourceQuota(nominal=0))
    return FlavorQuotas(name=doc.name, quotas=quotas)


def _optional(path: str, value: Quantity | None, error: type[ConfigError]) -> int | None:
    return None if value is None else quantity_at(path, value, error)


def _unique(path: str, names: Iterable[str], error: type[ConfigError]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise error(f"{path}: {name!r} is listed twice")
        seen.add(name)


def _check_acyclic(cohorts: tuple[CohortSpec, ...], error: type[ConfigError]) -> None:
    parents = {c.name: c.parent for c in cohorts}
    for start in parents:
        seen = {start}
        node = parents.get(start)
        while node is not None:
            if node in seen:
                raise error(f"cohorts: {start!r} is its own ancestor (a cycle through {node!r})")
            seen.add(node)
            node = parents.get(node)
