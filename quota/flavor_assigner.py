"""Flavor assignment (Kueue's ``flavorassigner``): pick, per pod set and resource
group, the flavor a workload would use, and say how well it fits there.

For each flavor of a group, in order, every requested resource of the group is
checked (counting what earlier pod sets of the same workload already take):
``FIT`` if it fits now, a preemption mode if it could after evictions,
``NO_FIT`` if never. The search stops at the first flavor that fits without
borrowing, or that fits by borrowing / needs preemption when the queue's
flavor fungibility says so; otherwise the best flavor seen wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from quota.cache import ClusterQueueNode
from quota.model import (
    BorrowWithinCohortPolicy,
    FlavorFungibility,
    PodSet,
    ReclaimWithinCohort,
    ResourceGroup,
    WhenCanBorrow,
    WhenCanPreempt,
    Workload,
)
from quota.reasons import Blocker, blocker_for
from quota.resources import FlavorResource
from quota.tree import available, potential_available

__all__ = [
    "Assignment",
    "FlavorAssigner",
    "FlavorChoice",
    "Mode",
    "PodSetAssignment",
    "ScanProgress",
    "Simulator",
    "find_borrow_level",
]


class Mode(IntEnum):
    """How a flavor fits, worst to best (Kueue's ``preemptionMode``)."""

    NO_FIT = 0
    NO_CANDIDATES = 1  # would need preemption, but nothing may be evicted
    PREEMPT = 2  # fits after evicting workloads, some in the workload's own queue
    RECLAIM = 3  # fits after evicting workloads of other queues only
    FIT = 4

    @property
    def needs_preemption(self) -> bool:
        return self in _NEEDS_PREEMPTION


# Enum members read once: reading one off its class costs about as much as a small
# function call, and the fit checks read them all the time.
_NO_FIT, _NO_CANDIDATES, _PREEMPT, _RECLAIM, _FIT = (
    Mode.NO_FIT,
    Mode.NO_CANDIDATES,
    Mode.PREEMPT,
    Mode.RECLAIM,
    Mode.FIT,
)
_NEEDS_PREEMPTION = frozenset((_NO_CANDIDATES, _PREEMPT, _RECLAIM))
_NO_GO = (_NO_FIT, _NO_CANDIDATES)
_BY_PREEMPTING = (_PREEMPT, _RECLAIM)
_BORROW_NEVER = BorrowWithinCohortPolicy.NEVER
_RECLAIM_NEVER = ReclaimWithinCohort.NEVER
_PREEMPT_TRY_NEXT = WhenCanPreempt.TRY_NEXT_FLAVOR
_BORROW_TRY_NEXT = WhenCanBorrow.TRY_NEXT_FLAVOR


_NO_KEYS: dict[str, FlavorResource] = {}  # a flavor the queue has no quota for

# (flavor-resource, amount) -> (mode after simulated preemption, borrow level after it)
Simulator = Callable[[FlavorResource, int], tuple[Mode, int]]


@dataclass(slots=True, unsafe_hash=True)  # a value: never changed once built
class FlavorChoice:
    flavor: str
    mode: Mode
    borrow: int  # height of the lowest cohort subtree it fits in; 0 = no borrowing

    def __init__(self, flavor: str, mode: Mode, borrow: int) -> None:
        # Written out: see quota/__init__.py, "Hot classes".
        self.flavor = flavor
        self.mode = mode
        self.borrow = borrow


@dataclass(slots=True)
class PodSetAssignment:
    name: str
    count: int
    requests: dict[str, int]  # totals for ``count`` pods
    flavors: dict[str, FlavorChoice]
    blockers: list[Blocker]
    failed: bool

    def __init__(self, name: str, count: int, requests: dict[str, int]) -> None:
        # Written out: see quota/__init__.py, "Hot classes".
        self.name = name
        self.count = count
        self.requests = requests
        self.flavors = {}
        self.blockers = []
        self.failed = False

    @property
    def mode(self) -> Mode:
        if self.failed:
            return _NO_FIT
        worst = _FIT  # a loop, not min(): asked several times per nomination
        for choice in self.flavors.values():
            if choice.mode < worst:
                worst = choice.mode
        return worst


@dataclass(slots=True)
class Assignment:
    """Flavors and counts for every pod set, the usage they add, and how they fit."""

    pod_sets: list[PodSetAssignment]
    usage: dict[FlavorResource, int]
    progress: dict[tuple[int, str], int]

    def __init__(self, pod_sets: list[PodSetAssignment], usage: dict[FlavorResource, int]) -> None:
        # Written out: see quota/__init__.py, "Hot classes".
        self.pod_sets = pod_sets
        self.usage = usage
        self.progress = {}

    @property
    def pending_flavors(self) -> bool:
        """Some group's flavor scan stopped before its last flavor."""
        return any(index != -1 for index in self.progress.values())

    @property
    def borrowing(self) -> int:
        most = 0  # loops, not max() of a generator: every cycle sorts its entries by it
        for pod_set in self.pod_sets:
            for choice in pod_set.flavors.values():
                if choice.borrow > most:
                    most = choice.borrow
        return most

    @property
    def mode(self) -> Mode:
        """The worst mode of any pod set (``NO_FIT`` if any pod set found no flavor)."""
        worst = _FIT
        for pod_set in self.pod_sets:
            mode = pod_set.mode
            if mode < worst:
                worst = mode
        return worst

    @property
    def fits(self) -> bool:
        return self.mode is _FIT

    @property
    def needs_preemption(self) -> bool:
        # The set, not Mode.needs_preemption: an enum's property stays interpreted.
        return self.mode in _NEEDS_PREEMPTION

    def needs_preemption_in(self) -> frozenset[FlavorResource]:
        needs = {
            (choice.flavor, resource)
            for p in self.pod_sets
            for resource, choice in p.flavors.items()
            if choice.mode in _NEEDS_PREEMPTION
        }
        return frozenset(fr for fr in self.usage if fr in needs)  # usage has them all

    @property
    def blockers(self) -> list[Blocker]:
        return [b for p in self.pod_sets for b in p.blockers]


# (pod set index, resource that started the group's search) -> flavor index tried last
ScanProgress = dict[tuple[int, str], int]


class FlavorAssigner:
    """Assigns flavors for one workload against the live usage of its queue.

    ``resume`` continues each group's flavor scan after the flavor where the
    previous attempt stopped (Kueue's preserved scan progress).
    """

    def __init__(
        self,
        workload: Workload,
        queue: ClusterQueueNode,
        simulate: Simulator,
        *,
        fair_sharing: bool = False,
        resume: ScanProgress | None = None,
    ) -> None:
        self.workload = workload
        self.queue = queue
        self.simulate = simulate
        self.fair_sharing = fair_sharing
        self.resume = resume or {}

    def assign(self, counts: list[int] | None = None) -> Assignment:
        assignment = Assignment(pod_sets=[], usage={})
        flavor_resources = self.queue.flavor_resources
        for index, pod_set in enumerate(self.workload.pod_sets):
            count = pod_set.count if counts is None else counts[index]
            result = self._assign_pod_set(index, pod_set, count, assignment)
            assignment.pod_sets.append(result)
            for resource, choice in result.flavors.items():
                amount = result.requests[resource]
                # The queue's own key: admitted usage keeps it, and a new one (a
                # NamedTuple) is both built by interpreted code and never untracked
                # by the garbage collector.
                fr = flavor_resources.get(choice.flavor, _NO_KEYS).get(resource)
                if fr is None:
                    fr = FlavorResource(choice.flavor, resource)
                assignment.usage[fr] = assignment.usage.get(fr, 0) + amount
            if result.failed:
                break
        return assignment

    def _assign_pod_set(
        self, index: int, pod_set: PodSet, count: int, assignment: Assignment
    ) -> PodSetAssignment:
        groups = self.queue.group_of
        # A zero request is ignored only for a resource the queue does not cover.
        requests = {r: v * count for r, v in pod_set.requests.items() if v or r in groups}
        result = PodSetAssignment(pod_set.name, count, requests)
        if count == 0:
            self._assign_zero_count(index, pod_set, result, assignment)
            return result
        for resource in requests:
            if resource in result.flavors:
                continue  # already placed with the rest of its group
            group_index = groups.get(resource)
            if group_index is None:
                result.failed = True
                result.blockers.append(Blocker.uncovered(self.queue.name, resource))
                return result
            group = self.queue.spec.resource_groups[group_index]
            wanted = {r: v for r, v in requests.items() if r in group.resources}
            first = self.resume.get((index, resource), -1) + 1
            chosen, tried = self._find_flavor(
                group, first, wanted, assignment.usage, result.blockers
            )
            if chosen is None:
                result.failed = True
                return result
            result.flavors.update(chosen)
            for covered in chosen:
                assignment.progress[(index, covered)] = tried
        return result

    def _assign_zero_count(
        self, index: int, pod_set: PodSet, result: PodSetAssignment, assignment: Assignment
    ) -> None:
        """A pod set of no pods takes no quota, but gets the flavor one of its pods
        could ever use (Kueue's capacity probe), else its group's first flavor."""
        for resource in result.requests:
            if resource in result.flavors:
                continue
            group = self.queue.spec.resource_groups[self.queue.group_of[resource]]
            wanted = [r for r in result.requests if r in group.resources]
            flavor = next(
                (
                    f.name
                    for f in group.flavors
                    if all(
                        pod_set.requests[r]
                        <= potential_available(self.queue, FlavorResource(f.name, r))
                        for r in wanted
                    )
                ),
                group.flavors[0].name,
            )
            for covered in wanted:
                result.flavors[covered] = FlavorChoice(flavor, _FIT, 0)
                assignment.progress[(index, covered)] = -1

    def _find_flavor(
        self,
        group: ResourceGroup,
        first: int,
        requests: dict[str, int],
        taken: dict[FlavorResource, int],
        blockers: list[Blocker],
    ) -> tuple[dict[str, FlavorChoice] | None, int]:
        """The chosen flavor per resource, and where the scan stopped (-1: at the end)."""
        fungibility = self.queue.spec.flavor_fungibility
        flavor_resources = self.queue.flavor_resources
        # The choices are made into FlavorChoice for the chosen flavor only: most
        # scans try a flavor that does not fit first.
        best: tuple[str, list[tuple[str, tuple[Mode, int]]]] | None = None
        best_mode = (_NO_FIT, 0)
        flavors = group.flavors
        attempted = len(flavors) - 1
        for position in range(min(first, len(flavors)), len(flavors)):
            name = flavors[position].name
            attempted = position
            found: list[tuple[str, tuple[Mode, int]]] = []
            worst = (_FIT, 0)
            keys = flavor_resources.get(name, _NO_KEYS)
            for resource, amount in requests.items():
                fr = keys.get(resource) or FlavorResource(name, resource)
                fit = self._fits(fr, amount + taken.get(fr, 0), blockers)
                found.append((resource, fit))
                if _preferred(worst, fit):
                    worst = fit
                if fit[0] is _NO_FIT:
                    break
            if not _try_next(worst, fungibility):
                best = (name, found)
                break
            if _preferred(worst, best_mode):
                best, best_mode = (name, found), worst
        stopped = -1 if attempted == len(flavors) - 1 else attempted
        if best is None:
            return None, stopped
        name, found = best
        return {r: FlavorChoice(name, mode, borrow) for r, (mode, borrow) in found}, stopped

    def _fits(self, fr: FlavorResource, amount: int, blockers: list[Blocker]) -> tuple[Mode, int]:
        queue = self.queue
        if fr.resource in queue.budget_resources:
            return self._fits_budget(fr, amount, blockers)
        if amount > potential_available(queue, fr):
            blockers.append(blocker_for(queue, fr, amount, exceeds_max=True))
            return _NO_FIT, 0
        room = available(queue, fr)
        if amount <= (room if room > 0 else 0):
            return _FIT, find_borrow_level(queue, fr, amount)[0]
        blockers.append(blocker_for(queue, fr, amount, room=room))
        if amount <= queue.quota(fr).nominal:
            return self.simulate(fr, amount)  # the borrow level is not needed to decide
        borrow, may_reclaim = find_borrow_level(queue, fr, amount)
        if may_reclaim or self._can_preempt_while_borrowing():
            return self.simulate(fr, amount)
        return _NO_FIT, borrow

    def _fits_budget(
        self, fr: FlavorResource, amount: int, blockers: list[Blocker]
    ) -> tuple[Mode, int]:
        """:meth:`_fits` for a budget, which never causes preemption: it fits in what is
        left along the path, or not at all. Budgets are checked for nearly every
        nomination and nearly always fit, so that case is answered first."""
        queue = self.queue
        room = available(queue, fr)
        if amount <= max(0, room):
            if queue.usage.get(fr, 0) + amount <= queue.quota(fr).nominal:
                return _FIT, 0  # find_borrow_level's first answer, without the call
            return _FIT, find_borrow_level(queue, fr, amount)[0]
        exceeds_max = amount > potential_available(queue, fr)
        blockers.append(blocker_for(queue, fr, amount, exceeds_max=exceeds_max, room=room))
        return _NO_FIT, 0

    def _can_preempt_while_borrowing(self) -> bool:
        policy = self.queue.spec.preemption
        if policy.borrow_within_cohort is not _BORROW_NEVER:
            return True
        return self.fair_sharing and policy.reclaim_within_cohort is not _RECLAIM_NEVER


def _preferred(a: tuple[Mode, int], b: tuple[Mode, int]) -> bool:
    """Is ``a`` strictly better than ``b``? A mode that fits or can preempt before one
    without candidates; then the better mode; then less borrowing."""
    if a[0] is _NO_FIT:
        return False
    if b[0] is _NO_FIT:
        return True
    if (a[0] is _NO_CANDIDATES) != (b[0] is _NO_CANDIDATES):
        return b[0] is _NO_CANDIDATES
    if a[0] != b[0]:
        return a[0] > b[0]
    return a[1] < b[1]


def _try_next(mode: tuple[Mode, int], fungibility: FlavorFungibility) -> bool:
    preemption, borrow = mode
    if preemption in _NO_GO:
        return True
    if preemption in _BY_PREEMPTING:
        return fungibility.when_can_preempt is _PREEMPT_TRY_NEXT
    return borrow != 0 and fungibility.when_can_borrow is _BORROW_TRY_NEXT


def find_borrow_level(queue: ClusterQueueNode, fr: FlavorResource, amount: int) -> tuple[int, bool]:
    """Height of the lowest cohort subtree that can hold ``amount`` more (0 when the
    queue needs no borrowing), and whether that subtree is below the root."""
    node = queue.cohort
    if node is None:
        return 0, False
    used = queue.usage.get(fr, 0)
    quota = queue.quotas.get(fr)
    if used + amount <= (0 if quota is None else quota.nominal):
        return 0, True
    # local_available, inlined (called a lot); an empty dict still hashes the key
    guaranteed = queue.guaranteed
    free = guaranteed.get(fr, 0) - used if guaranteed else -used
    remaining = amount - free if free > 0 else amount
    while True:
        used = node.usage.get(fr, 0)
        if used + remaining <= node.subtree_quota.get(fr, 0):
            return node.height, node.parent is not None
        guaranteed = node.guaranteed
        free = guaranteed.get(fr, 0) - used if guaranteed else -used
        if free > 0:
            remaining -= free
        above = node.cohort
        if above is None:
            return node.height, False
        node = above
