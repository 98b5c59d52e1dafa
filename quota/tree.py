"""Quota arithmetic over the cohort tree (Kueue's ``resource_node.go``).

Every cluster queue and cohort is a :class:`ResourceNode`. A node's
``subtree_quota`` is its own nominal quota plus what its children lend up to
it; the part of it kept back by a lending limit (``guaranteed``) stays
private, and usage above that part is also recorded in the parent. So a
cohort's ``usage`` is what its subtree takes from the shared pool, and every
check walks only the path from a queue to the root.

Amounts may go negative (``available``) when quota shrinks under admitted
work; callers compare, they never assume non-negative.
"""

from __future__ import annotations

from collections.abc import Iterable

from quota.model import ResourceQuota
from quota.resources import FlavorResource

__all__ = [
    "ResourceNode",
    "add_usage",
    "available",
    "lineage",
    "local_available",
    "path_to_root",
    "potential_available",
    "queue_available",
    "remove_usage",
]

_NO_QUOTA = ResourceQuota(nominal=0)


class ResourceNode:
    """Quota and usage of one cluster queue or cohort, linked to its parent cohort."""

    __slots__ = (
        "_lineage",
        "_plans",
        "guaranteed",
        "name",
        "parent",
        "potential",
        "quotas",
        "subtree_quota",
        "usage",
        "weight",
    )

    def __init__(
        self, name: str, quotas: dict[FlavorResource, ResourceQuota], weight: float = 1.0
    ) -> None:
        self.name = name
        self.weight = weight  # fair-sharing weight
        self.parent: ResourceNode | None = None
        self.quotas = quotas
        self.subtree_quota: dict[FlavorResource, int] = {}
        self.guaranteed: dict[FlavorResource, int] = {}
        self.usage: dict[FlavorResource, int] = {}
        self.potential: dict[FlavorResource, int] = {}  # see potential_available
        self._lineage: tuple[ResourceNode, ...] | None = None  # see lineage
        self._plans: dict[FlavorResource, _Plan] = {}  # see available

    def quota(self, fr: FlavorResource) -> ResourceQuota:
        return self.quotas.get(fr, _NO_QUOTA)

    def set_subtree_quota(self, children: Iterable[ResourceNode]) -> None:
        """Own nominal quota plus each child's lendable part; recompute ``guaranteed``."""
        subtree = {fr: q.nominal for fr, q in self.quotas.items()}
        for child in children:
            for fr, amount in child.subtree_quota.items():
                subtree[fr] = subtree.get(fr, 0) + amount - child.guaranteed.get(fr, 0)
        self.subtree_quota = subtree
        self._lineage = None  # the tree is (re)linked before its quotas are set
        self.potential = {}
        self._plans = {}
        self.guaranteed = {}
        for fr, amount in subtree.items():
            limit = self.quota(fr).lending_limit
            if limit is not None:
                self.guaranteed[fr] = max(0, amount - limit)


def path_to_root(node: ResourceNode) -> list[ResourceNode]:
    """The node, its parent, and so on up to the root."""
    path = [node]
    parent = node.parent
    while parent is not None:
        path.append(parent)
        parent = parent.parent
    return path


def lineage(node: ResourceNode) -> tuple[ResourceNode, ...]:
    """The root first, down to the node. Kept on the node: every fit check walks it,
    and a tree's shape is fixed once its quotas are set."""
    kept = node._lineage
    if kept is None:
        kept = node._lineage = tuple(reversed(path_to_root(node)))
    return kept


def local_available(node: ResourceNode, fr: FlavorResource) -> int:
    """Free quota the node keeps to itself (its guaranteed part), never negative."""
    return max(0, node.guaranteed.get(fr, 0) - node.usage.get(fr, 0))


def queue_available(node: ResourceNode, fr: FlavorResource) -> int:
    """:func:`available` as a queue sees it: never below zero."""
    return max(0, available(node, fr))


def available(node: ResourceNode, fr: FlavorResource) -> int:
    """What a workload in ``node`` may still take: local free quota plus what the
    ancestors can give, each hop capped by the node's borrowing limit."""
    plan = node._plans.get(fr)
    if plan is None:
        plan = _plan(node, fr)
    root, total, steps = plan
    total -= root.usage.get(fr, 0)
    for child, guaranteed, cap in steps:
        usage = child.usage.get(fr, 0)
        if cap is not None:
            # cap less what the child has stored in its parent
            limit = cap - usage + guaranteed if usage > guaranteed else cap
            if limit < total:
                total = limit
        if guaranteed > usage:
            total += guaranteed - usage
    return total


# What :func:`available` reads apart from usage: the root, its subtree quota, and per
# node below it down to the queue its guaranteed part and, with a borrowing limit,
# what it may hold in its parent (its lendable part plus the limit).
_Plan = tuple[ResourceNode, int, tuple[tuple[ResourceNode, int, int | None], ...]]


def _plan(node: ResourceNode, fr: FlavorResource) -> _Plan:
    """Kept on the node, as :func:`potential_available` is: quotas are fixed once set,
    and :func:`available` is asked for the same node and flavor-resource all the time."""
    chain = lineage(node)
    root = chain[0]
    steps: list[tuple[ResourceNode, int, int | None]] = []
    for child in chain[1:]:
        guaranteed = child.guaranteed.get(fr, 0)
        quota = child.quotas.get(fr)
        cap: int | None = None
        if quota is not None and quota.borrowing_limit is not None:
            cap = child.subtree_quota.get(fr, 0) - guaranteed + quota.borrowing_limit
        steps.append((child, guaranteed, cap))
    plan = node._plans[fr] = (root, root.subtree_quota.get(fr, 0), tuple(steps))
    return plan


def potential_available(node: ResourceNode, fr: FlavorResource) -> int:
    """``available`` with no usage anywhere: the most the node could ever get.

    It depends on quotas alone, so it is computed once per node and kept."""
    cached = node.potential.get(fr)
    if cached is not None:
        return cached
    parent = node.parent
    if parent is None:
        total = node.subtree_quota.get(fr, 0)
    else:
        total = node.guaranteed.get(fr, 0) + potential_available(parent, fr)
        limit = node.quota(fr).borrowing_limit
        if limit is not None:
            total = min(total, node.subtree_quota.get(fr, 0) + limit)
    node.potential[fr] = total
    return total


def add_usage(node: ResourceNode, fr: FlavorResource, amount: int) -> None:
    """Add usage; what exceeds the node's free guaranteed part is charged to the parent."""
    while True:
        usage, guaranteed = node.usage, node.guaranteed
        used = usage.get(fr, 0)
        # Most nodes keep nothing back (no lending limit), and asking an empty dict
        # still hashes the key, a tuple: skipped here and below, on every admission.
        free_local = guaranteed.get(fr, 0) - used if guaranteed else -used
        if free_local < 0:
            free_local = 0
        usage[fr] = used + amount
        parent = node.parent
        if parent is None or amount <= free_local:
            return
        amount -= free_local
        node = parent


def remove_usage(node: ResourceNode, fr: FlavorResource, amount: int) -> None:
    """Undo :func:`add_usage`: release from the parent what was stored there."""
    while True:
        usage, guaranteed = node.usage, node.guaranteed
        used = usage.get(fr, 0)
        stored_in_parent = used - guaranteed.get(fr, 0) if guaranteed else used
        usage[fr] = used - amount
        parent = node.parent
        if parent is None or stored_in_parent <= 0:
            return
        amount = min(amount, stored_in_parent)
        node = parent
