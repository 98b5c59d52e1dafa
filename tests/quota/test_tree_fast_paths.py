"""The quick forms of the quota arithmetic against their plain definitions, asked
again and again while usage changes: :func:`quota.tree.available` keeps a plan of
each node's quotas (it must never keep usage), and
:func:`quota.flavor_assigner.find_borrow_level` reads each node once."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from quota.cache import ClusterQueueNode, ClusterState, CohortNode
from quota.flavor_assigner import find_borrow_level
from quota.model import QuotaConfig
from quota.resources import FlavorResource
from quota.tree import ResourceNode, add_usage, available, lineage, local_available, remove_usage
from tests.quota.test_properties import BASE, _resources_of, between, quota_configs

AMOUNTS = st.sampled_from([250, 500, 1000, 1500, 3000])
INDEXES = st.integers(0, 63)  # taken modulo the queues and flavor-resources there are
PROBES = (0, 500, 1000, 4000)

Step = tuple[int, int, int, bool]  # queue, flavor-resource, amount, remove the oldest held


def plain_available(node: ResourceNode, fr: FlavorResource) -> int:
    """:func:`quota.tree.available` as first written: every quota read on every call."""
    chain = lineage(node)
    root = chain[0]
    total = root.subtree_quota.get(fr, 0) - root.usage.get(fr, 0)
    for child in chain[1:]:
        usage = child.usage.get(fr, 0)
        guaranteed = child.guaranteed.get(fr, 0)
        quota = child.quotas.get(fr)
        if quota is not None and quota.borrowing_limit is not None:
            stored_in_parent = child.subtree_quota.get(fr, 0) - guaranteed
            used_in_parent = usage - guaranteed if usage > guaranteed else 0
            total = min(total, stored_in_parent - used_in_parent + quota.borrowing_limit)
        if guaranteed > usage:
            total += guaranteed - usage
    return total


def plain_borrow_level(
    queue: ClusterQueueNode, fr: FlavorResource, amount: int
) -> tuple[int, bool]:
    """:func:`quota.flavor_assigner.find_borrow_level` as first written."""
    parent = queue.cohort
    if parent is None or queue.usage.get(fr, 0) + amount <= queue.quota(fr).nominal:
        return 0, parent is not None
    remaining = amount - local_available(queue, fr)
    node: CohortNode | None = parent
    root = parent
    while node is not None:
        if node.usage.get(fr, 0) + remaining <= node.subtree_quota.get(fr, 0):
            return node.height, node.parent is not None
        remaining -= local_available(node, fr)
        root = node
        node = node.cohort
    return root.height, False


@st.composite
def usage_walks(draw: st.DrawFn) -> tuple[QuotaConfig, list[Step]]:
    config = draw(quota_configs())
    steps = [
        (draw(INDEXES), draw(INDEXES), draw(AMOUNTS), between(draw, 0, 3) == 0)
        for _ in range(between(draw, 1, 30))
    ]
    return config, steps


def check(state: ClusterState, frs: list[FlavorResource]) -> None:
    nodes: list[Any] = [*state.queues.values(), *state.cohorts.values()]
    for node in nodes:
        for fr in frs:
            assert available(node, fr) == plain_available(node, fr), (node.name, fr)
    for queue in state.queues.values():
        for fr in frs:
            for amount in PROBES:
                got = find_borrow_level(queue, fr, amount)
                assert got == plain_borrow_level(queue, fr, amount), (queue.name, fr, amount)


@settings(BASE, max_examples=300)
@given(usage_walks())
def test_fast_quota_arithmetic_follows_usage(case: tuple[QuotaConfig, list[Step]]) -> None:
    config, steps = case
    state = ClusterState.build(config)
    frs = [FlavorResource(f, r) for f in config.flavors for r in _resources_of(config)]
    queues = list(state.queues.values())
    held: list[tuple[ClusterQueueNode, FlavorResource, int]] = []
    check(state, frs)  # plans are made here, before any usage
    for queue_index, fr_index, amount, remove in steps:
        if remove and held:
            queue, fr, amount = held.pop(0)
            remove_usage(queue, fr, amount)
        else:
            queue, fr = queues[queue_index % len(queues)], frs[fr_index % len(frs)]
            add_usage(queue, fr, amount)
            held.append((queue, fr, amount))
        check(state, frs)
