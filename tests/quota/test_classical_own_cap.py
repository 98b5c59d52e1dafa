"""When a queue's borrowing limit is what bounds it, removals from other queues change
none of its fit checks, so the fast search asks only the queue's own candidates
(``_others_cannot_help`` in :mod:`quota.preemption.classical`). Kueue still takes the
other queues' candidates first and gives them back at the end, and each give-back
moves the last target into the freed place, so the targets' order depends on how many
it took. Each case is asked of the fast search and of the plain reference, which
walks everything: both must give the same targets in the same order, and the case
says which."""

from __future__ import annotations

from dataclasses import replace

import pytest

from quota.cache import ClusterState
from quota.model import (
    BorrowWithinCohortPolicy,
    ClusterQueueSpec,
    CohortSpec,
    FlavorQuotas,
    PodSet,
    QuotaConfig,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from quota.preemption import classical_reference
from quota.preemption.classical import classical_targets
from quota.preemption.common import PreemptionRequest
from tests.quota.h100 import CPU, GPU, GPU_FR, POLICY, admit

# Reclaim while borrowing: an attempt that allows borrowing may take b's candidates of
# lower priority than the preemptor's.
RECLAIM_WHILE_BORROWING = replace(
    POLICY, borrow_within_cohort=BorrowWithinCohortPolicy.LOWER_PRIORITY
)


def _state(a_limit: int) -> ClusterState:
    """``a`` (4 GPUs and a borrowing limit), ``b`` (4 GPUs) and ``c`` (8 GPUs, idle:
    the cohort has room, so ``a``'s limit is what bounds it) share a cohort."""

    def queue(name: str, gpus: int, limit: int | None) -> ClusterQueueSpec:
        quotas = {GPU: ResourceQuota(gpus * 1000, borrowing_limit=limit)}
        group = ResourceGroup((GPU,), (FlavorQuotas("h100", quotas),))
        return ClusterQueueSpec(name, "org", (group,), preemption=RECLAIM_WHILE_BORROWING)

    return ClusterState.build(
        QuotaConfig(
            flavors=("h100",),
            cohorts=(CohortSpec("org"),),
            cluster_queues=(
                queue("a", 4, a_limit * 1000),
                queue("b", 4, None),
                queue("c", 8, None),
            ),
        )
    )


# (case, a's borrowing limit, a's admitted (name, GPUs, priority), b's admitted, the
#  request's GPUs, the targets both searches must find, in order). b's candidates come
#  first in Kueue's order; a's own in victim order: a3 (the newer), then a2.
CASES = [
    # b borrows 2: Kueue takes b1, then b is back within nominal. a3 and a2 both go,
    # and giving b1 back moves a2 to the front.
    (
        "one other taken, two own",
        0,
        [("a1", 1, 9), ("a2", 1, 1), ("a3", 2, 1)],
        [("b1", 2, 0), ("b2", 4, 9)],
        3,
        ["a2", "a3"],
    ),
    # b1 and b3 both go before b is back within nominal: two turns, the first order.
    (
        "two others taken, two own",
        0,
        [("a1", 1, 9), ("a2", 1, 1), ("a3", 2, 1)],
        [("b1", 1, 0), ("b3", 1, 0), ("b2", 4, 9)],
        3,
        ["a3", "a2"],
    ),
    ("one own is enough", 0, [("a1", 2, 9), ("a2", 2, 1)], [("b1", 2, 0), ("b2", 4, 9)], 2, ["a2"]),
    (
        "own ones are not enough",
        0,
        [("a1", 3, 9), ("a2", 1, 1)],
        [("b1", 2, 0), ("b2", 4, 9)],
        2,
        [],
    ),
    # Under its limit the workload fits already; Kueue's attempt still removes its
    # first candidate, b's, and keeps it.
    ("fits already", 2, [("a1", 2, 9), ("a2", 2, 1)], [("b1", 2, 0), ("b2", 4, 9)], 2, ["b1"]),
]


@pytest.mark.parametrize(
    ("limit", "in_a", "in_b", "gpus", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_a_queue_bound_by_its_limit_ends_as_kueue_does(
    limit: int,
    in_a: list[tuple[str, int, int]],
    in_b: list[tuple[str, int, int]],
    gpus: int,
    expected: list[str],
) -> None:
    found = {}
    for search in (classical_targets, classical_reference.classical_targets):
        state = _state(limit)
        for queue, admitted in (("a", in_a), ("b", in_b)):
            for name, count, priority in admitted:
                admit(state, name, queue, count, {GPU: 1000}, priority)
        usage_before = {name: dict(node.usage) for name, node in state.queues.items()}
        workload = Workload("new", "a", (PodSet("p", gpus, {GPU: 1000, CPU: 0}),), priority=5)
        request = PreemptionRequest(
            workload, state.queues["a"], {GPU_FR: gpus * 1000}, frozenset((GPU_FR,))
        )
        found[search.__module__] = [(t.name, t.reason) for t in search(state, request)]
        # a search puts back whatever it simulates taking out
        assert {name: dict(node.usage) for name, node in state.queues.items()} == usage_before
    fast, reference = found.values()
    assert fast == reference
    assert [name for name, _ in fast] == expected
