"""The fair-sharing admission order as it was before tournaments were kept across
pops (quota/fair_iterator.py): a tournament built afresh at every pop. Kept as the
reference tests/quota/test_fair_order.py holds the kept one to.

Admission order under fair sharing (Kueue's ``fair_sharing_iterator.go``).

At every pop, a tournament runs down the cohort tree of some pending entry. At
each cohort the contenders are its child queues' heads and the winners of its
child cohorts, each represented by the share its subtree would have at that
level if the entry were admitted. Preferred, in order: not borrowing on a
flavor-resource it requests, smaller share, higher priority, older, name.
"""

from __future__ import annotations

from collections.abc import Iterator

from quota.cache import ClusterQueueNode, ClusterState, CohortNode
from quota.entry import Entry
from quota.fair_sharing import DRS, compare_drs, dominant_resource_share
from quota.resources import FlavorResource

__all__ = ["fair_sharing_order"]

# (cohort name, workload name) -> share of the cohort's child on the workload's path
Shares = dict[tuple[str, str], DRS]


def fair_sharing_order(state: ClusterState, entries: list[Entry]) -> Iterator[Entry]:
    """Yield entries one by one, recomputing shares from the live usage each time, so
    what earlier entries admitted or reserved counts against the later ones."""
    pending = {e.queue.name: e for e in entries}
    while pending:
        entry = pending[min(pending)]
        if entry.queue.parent is not None:
            entry = _Tournament(state, pending, entry.queue).winner()
        del pending[entry.queue.name]
        yield entry


class _Tournament:
    def __init__(
        self, state: ClusterState, pending: dict[str, Entry], queue: ClusterQueueNode
    ) -> None:
        self.pending = pending
        self.root = state.root_of(queue)
        self.shares: Shares = {}
        self.requested: dict[str, dict[FlavorResource, int]] = {}
        for member in state.queues_under(self.root):
            contender = pending.get(member.name)
            if contender is not None:
                self._record_shares(state, member, contender)

    def _record_shares(self, state: ClusterState, queue: ClusterQueueNode, entry: Entry) -> None:
        usage = entry.assignment.usage
        state.charge(queue, usage)
        try:
            self.requested[entry.workload.name] = usage
            share = dominant_resource_share(queue)
            node = queue.parent
            while node is not None:
                self.shares[(node.name, entry.workload.name)] = share
                share = dominant_resource_share(node)
                node = node.parent
        finally:
            state.refund(queue, usage)

    def winner(self) -> Entry:
        assert isinstance(self.root, CohortNode)
        best = self._play(self.root)
        assert best is not None
        return best

    def _play(self, cohort: CohortNode) -> Entry | None:
        contenders = []
        for child in sorted(cohort.child_cohorts, key=lambda c: c.name):
            best = self._play(child)
            if best is not None:
                contenders.append(best)
        for queue in sorted(cohort.child_queues, key=lambda q: q.name):
            if queue.name in self.pending:
                contenders.append(self.pending[queue.name])
        if not contenders:
            return None
        best = contenders[0]
        for current in contenders[1:]:
            if self._less(current, best, cohort.name):
                best = current
        return best

    def _less(self, a: Entry, b: Entry, cohort: str) -> bool:
        share_a = self.shares[(cohort, a.workload.name)]
        share_b = self.shares[(cohort, b.workload.name)]
        a_borrows = share_a.borrowing_on(self.requested[a.workload.name])
        b_borrows = share_b.borrowing_on(self.requested[b.workload.name])
        if a_borrows != b_borrows:
            return not a_borrows
        versus = compare_drs(share_a, share_b)
        if versus != 0:
            return versus < 0
        wa, wb = a.workload, b.workload
        return (-wa.priority, wa.order_time, wa.name) < (-wb.priority, wb.order_time, wb.name)
