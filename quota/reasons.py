"""Why a workload waits: a stable code, words, and the queue or cohort level and
resource that block it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from quota.budgets import budget_label, format_hours, is_budget
from quota.resources import FlavorResource, format_quantity
from quota.tree import ResourceNode, available, potential_available

__all__ = [
    "Blocker",
    "BlockerLevel",
    "PendingReason",
    "ReasonCode",
    "blocker_for",
    "blockers_message",
    "format_amount",
]


class ReasonCode(StrEnum):
    INSUFFICIENT_QUOTA = "InsufficientQuota"
    EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
    INSUFFICIENT_BUDGET = "InsufficientBudget"
    EXCEEDS_MAX_BUDGET = "ExceedsMaxBudget"
    MAX_RUNTIME_REQUIRED = "MaxRuntimeRequired"
    RESOURCE_NOT_COVERED = "ResourceNotCovered"
    NO_PREEMPTION_CANDIDATES = "NoPreemptionCandidates"
    WAITING_FOR_PREEMPTION = "WaitingForPreemptedWorkloads"
    NO_LONGER_FITS = "NoLongerFits"
    QUEUE_STOPPED = "ClusterQueueStopped"
    QUEUED = "Queued"


class BlockerLevel(StrEnum):
    CLUSTER_QUEUE = "ClusterQueue"
    COHORT = "Cohort"


@dataclass(slots=True, unsafe_hash=True)  # a value: never changed once built
class Blocker:
    """One resource in one flavor that does not fit, and the level of the tree that refuses it."""

    code: ReasonCode
    level: BlockerLevel
    name: str
    resource: str
    flavor: str | None
    requested: int
    available: int

    def __init__(  # written out: see quota/__init__.py, "Hot classes"
        self,
        code: ReasonCode,
        level: BlockerLevel,
        name: str,
        resource: str,
        flavor: str | None = None,
        requested: int = 0,
        available: int = 0,
    ) -> None:
        self.code = code
        self.level = level
        self.name = name
        self.resource = resource
        self.flavor = flavor
        self.requested = requested
        self.available = available

    @classmethod
    def uncovered(cls, queue: str, resource: str) -> Blocker:
        return cls(ReasonCode.RESOURCE_NOT_COVERED, BlockerLevel.CLUSTER_QUEUE, queue, resource)

    @property
    def message(self) -> str:
        kind = "cluster queue" if self.level is BlockerLevel.CLUSTER_QUEUE else "cohort"
        where = f"{kind} {self.name}"
        if self.code is ReasonCode.RESOURCE_NOT_COVERED:
            return f"resource {self.resource} is not covered by any resource group of {where}"
        if is_budget(self.resource):
            needs = f"needs {format_hours(self.requested)} {budget_label(self.resource)}"
            left = format_hours(self.available)
            if self.code is ReasonCode.EXCEEDS_MAX_BUDGET:
                return f"{needs}, more than {where} can ever have for {self.flavor} ({left})"
            return f"{needs}, {left} left in {where} for {self.flavor}"
        amount = f"{format_quantity(self.requested)} {self.resource} in flavor {self.flavor}"
        if self.code is ReasonCode.EXCEEDS_MAX_QUOTA:
            return (
                f"requests {amount}, more than {where} can ever provide"
                f" ({format_quantity(self.available)})"
            )
        return f"requests {amount}; {where} has {format_quantity(self.available)} available"


class PendingReason:
    """A stable code, words, and the blockers. Without ``message``, the words are
    ``prefix`` and the blockers' messages, written when first read: an engine refuses
    most heads it nominates, and most of those reasons are never shown."""

    __slots__ = ("_message", "_prefix", "blockers", "code")

    def __init__(
        self,
        code: ReasonCode,
        message: str | None = None,
        blockers: tuple[Blocker, ...] = (),
        *,
        prefix: str = "",
    ) -> None:
        self.code = code
        self.blockers = blockers
        self._message = message
        self._prefix = prefix

    @property
    def message(self) -> str:
        if self._message is None:
            self._message = self._prefix + blockers_message(self.blockers)
        return self._message

    def _key(self) -> tuple[ReasonCode, str, tuple[Blocker, ...]]:
        return self.code, self.message, self.blockers

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PendingReason):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"PendingReason({self.code!r}, {self.message!r}, {self.blockers!r})"

    def detail(self) -> list[dict[str, str | None]]:
        """The blockers as data, once each, amounts as people read them: what a
        workload's reason stores and the API shows."""
        return [
            {
                "code": b.code.value,
                "level": b.level.value,
                "name": b.name,
                "flavor": b.flavor,
                "resource": b.resource,
                "requested": format_amount(b.resource, b.requested),
                "available": format_amount(b.resource, b.available),
            }
            for b in dict.fromkeys(self.blockers)
        ]


def blockers_message(blockers: tuple[Blocker, ...]) -> str:
    """Each distinct blocker's message, in order; "does not fit" without any."""
    if not blockers:
        return "does not fit"
    return "; ".join(dict.fromkeys(b.message for b in blockers))


def blocker_for(
    queue: ResourceNode,
    fr: FlavorResource,
    amount: int,
    *,
    exceeds_max: bool = False,
    room: int | None = None,
) -> Blocker:
    """Name the level that refuses ``amount``: the lowest node on the path whose own
    borrowing limit binds, or else the root of the tree (the shared pool is short).
    ``room``: ``available(queue, fr)`` if the caller has it already."""
    node = queue
    while node.parent is not None and not _limit_binds(node, fr, exceeds_max):
        node = node.parent
    level = _QUEUE_LEVEL if node is queue else _COHORT_LEVEL
    code = _CODES[is_budget(fr.resource), exceeds_max]
    if exceeds_max:
        measured = potential_available(queue, fr)
    else:
        measured = available(queue, fr) if room is None else room
    return Blocker(code, level, node.name, fr.resource, fr.flavor, amount, max(0, measured))


# Enum members read once (reading one off its class is slow): blocker_for is called
# for nearly every flavor a nomination tries.
_QUEUE_LEVEL, _COHORT_LEVEL = BlockerLevel.CLUSTER_QUEUE, BlockerLevel.COHORT
_CODES = {  # (a budget, exceeds the most there could ever be) -> code
    (True, True): ReasonCode.EXCEEDS_MAX_BUDGET,
    (True, False): ReasonCode.INSUFFICIENT_BUDGET,
    (False, True): ReasonCode.EXCEEDS_MAX_QUOTA,
    (False, False): ReasonCode.INSUFFICIENT_QUOTA,
}


def _limit_binds(node: ResourceNode, fr: FlavorResource, exceeds_max: bool) -> bool:
    limit = node.quota(fr).borrowing_limit
    if limit is None or node.parent is None:
        return False
    guaranteed = node.guaranteed.get(fr, 0)
    if exceeds_max:
        return node.subtree_quota.get(fr, 0) + limit < guaranteed + potential_available(
            node.parent, fr
        )
    used_in_parent = max(0, node.usage.get(fr, 0) - guaranteed)
    cap = node.subtree_quota.get(fr, 0) - guaranteed - used_in_parent + limit
    return cap < available(node.parent, fr)


def format_amount(resource: str, amount: int) -> str:
    """An amount as people read it: a quantity, or hours for a budget resource."""
    return format_hours(amount) if is_budget(resource) else format_quantity(amount)
