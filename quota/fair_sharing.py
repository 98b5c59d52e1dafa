"""Dominant resource share (Kueue's ``fair_sharing.go``).

A node's share is, over resources, the largest ``borrowed * 1000 / lendable``,
where *borrowed* is its usage above its subtree quota (summed over flavors) and
*lendable* is what its parent could ever give (summed over flavors), divided
by the node's fair weight. Roots share nothing. Floats are used on purpose, in
Kueue's operation order, so equal shares compare equal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from quota.budgets import is_budget
from quota.resources import FlavorResource
from quota.tree import ResourceNode, potential_available

__all__ = ["DRS", "NEGATIVE_DRS", "compare_drs", "dominant_resource_share"]


@dataclass(slots=True, unsafe_hash=True)  # a value: never changed once built
class DRS:
    weight: float
    ratio: float
    dominant: str
    borrowing: bool
    borrowed: frozenset[FlavorResource]

    def __init__(  # written out: see quota/__init__.py, "Hot classes"
        self,
        weight: float,
        ratio: float,
        dominant: str = "",
        borrowing: bool = False,
        borrowed: frozenset[FlavorResource] = frozenset(),
    ) -> None:
        self.weight = weight
        self.ratio = ratio
        self.dominant = dominant
        self.borrowing = borrowing
        self.borrowed = borrowed

    @property
    def zero_weight_borrows(self) -> bool:
        return self.weight == 0 and self.borrowing

    @property
    def weighted(self) -> float:
        if self.zero_weight_borrows:
            return math.inf
        if self.ratio == 0:
            return 0.0
        return self.ratio / self.weight

    def borrowing_on(self, requested: dict[FlavorResource, int]) -> bool:
        return any(requested.get(fr, 0) > 0 for fr in self.borrowed)


NEGATIVE_DRS = DRS(weight=1.0, ratio=-1.0)


def compare_drs(a: DRS, b: DRS) -> int:
    """-1 if ``a`` is the fairer (smaller) share, 1 if larger, 0 if equal."""
    if a.zero_weight_borrows and b.zero_weight_borrows:
        return (a.ratio > b.ratio) - (a.ratio < b.ratio)
    if a.zero_weight_borrows:
        return 1
    if b.zero_weight_borrows:
        return -1
    wa, wb = a.weighted, b.weighted
    return (wa > wb) - (wa < wb)


def dominant_resource_share(
    node: ResourceNode, added: Mapping[FlavorResource, int] | None = None
) -> DRS:
    """The node's share, or what it would be were ``added`` charged to it (its own
    usage grows by exactly that; what it could borrow depends on quotas alone)."""
    weight = node.weight
    parent = node.parent
    if parent is None:
        return DRS(weight=weight, ratio=0.0)
    borrowed: dict[str, int] = {}
    borrowed_frs = []
    for fr, quota in node.subtree_quota.items():
        if is_budget(fr.resource):
            continue  # budgets are not shares of the pool
        over = node.usage.get(fr, 0) - quota
        if added is not None:
            over += added.get(fr, 0)
        if over > 0:
            borrowed[fr.resource] = borrowed.get(fr.resource, 0) + over
            borrowed_frs.append(fr)
    if not borrowed:
        return DRS(weight=weight, ratio=0.0)
    root = parent
    while root.parent is not None:
        root = root.parent
    lendable: dict[str, int] = {}
    for fr in root.subtree_quota:
        if fr.resource in borrowed:
            lendable[fr.resource] = lendable.get(fr.resource, 0) + potential_available(parent, fr)
    ratio, dominant = 0.0, ""
    for resource, amount in borrowed.items():
        total = lendable.get(resource, 0)
        if total > 0:
            value = float(amount) * 1000.0 / float(total)
            if value > ratio or (value == ratio and resource < dominant):
                ratio, dominant = value, resource
    return DRS(weight, ratio, dominant, True, frozenset(borrowed_frs))
