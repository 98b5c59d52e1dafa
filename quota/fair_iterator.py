"""Admission order under fair sharing (Kueue's ``fair_sharing_iterator.go``).

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
from quota.tree import ResourceNode, lineage

__all__ = ["fair_sharing_order"]

# (cohort name, workload name) -> share of the cohort's child on the workload's path
Shares = dict[tuple[str, str], DRS]


def fair_sharing_order(state: ClusterState, entries: list[Entry]) -> Iterator[Entry]:
    """Yield entries one by one, with shares as the live usage stands at each pop, so
    what earlier entries admitted or reserved counts against the later ones.

    A tree's tournament is built at its first pop and kept: processing an entry
    changes usage only along its queue's path, and a contender's shares read the
    usage of its own path below the root alone, so after each pop only the
    contenders whose path meets the popped entry's are scored again."""
    pending = {e.queue.name: e for e in entries}
    tournaments: dict[int, _Tournament] = {}  # by id of the tree's root
    while pending:
        entry = pending[min(pending)]
        # The last one wins alone: no tournament can pick another.
        if entry.queue.parent is not None and len(pending) > 1:
            root = state.root_of(entry.queue)
            tournament = tournaments.get(id(root))
            if tournament is None:
                tournament = tournaments[id(root)] = _Tournament(state, pending, root)
            entry = tournament.winner()
        del pending[entry.queue.name]
        yield entry
        touched = tournaments.get(id(state.root_of(entry.queue)))
        if touched is not None:
            touched.rescore(state, entry.queue)


class _Tournament:
    def __init__(self, state: ClusterState, pending: dict[str, Entry], root: ResourceNode) -> None:
        self.pending = pending
        self.root = root
        self.shares: Shares = {}
        self.requested: dict[str, dict[FlavorResource, int]] = {}
        self.members = [q for q in state.queues_under(root) if q.name in pending]
        for member in self.members:
            self._record_shares(state, member, pending[member.name])

    def rescore(self, state: ClusterState, changed: ClusterQueueNode) -> None:
        """Usage changed along ``changed``'s path: score again the contenders whose
        path below the root meets it."""
        below_root = {id(node) for node in lineage(changed)[1:]}
        for member in self.members:
            entry = self.pending.get(member.name)
            if entry is not None and any(id(node) in below_root for node in lineage(member)[1:]):
                self._record_shares(state, member, entry)

    def _record_shares(self, state: ClusterState, queue: ClusterQueueNode, entry: Entry) -> None:
        usage = entry.assignment.usage
        name = entry.workload.name
        self.requested[name] = usage
        parent = queue.parent
        if parent is not None and parent.parent is None:
            # Only the queue's own share is read, and charging would add exactly the
            # usage to the queue's own: the tree need not be charged and refunded.
            self.shares[(parent.name, name)] = dominant_resource_share(queue, usage)
            return
        state.charge(queue, usage)
        try:
            share = dominant_resource_share(queue)
            node = queue.parent
            while node is not None:
                self.shares[(node.name, name)] = share
                if node.parent is None:
                    break  # a root's share is read by no one
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
        cohorts, queues = cohort.by_name()
        contenders = []
        for child in cohorts:
            best = self._play(child)
            if best is not None:
                contenders.append(best)
        pending = self.pending
        for queue in queues:
            found = pending.get(queue.name)
            if found is not None:
                contenders.append(found)
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
