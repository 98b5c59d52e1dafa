"""The previous :class:`quota.queues.PendingQueue`, kept as the reference that the
property tests hold the current one to."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field

from quota.model import QueueingStrategy, Workload
from quota.queues import QueueKey, equivalence_key, queue_key

__all__ = ["ReferencePendingQueue"]


@dataclass
class ReferencePendingQueue:
    """The pending queue as it was before set-aside classes were kept whole (one heap
    of workloads; a requeue pushes every set-aside workload back): what
    :class:`quota.queues.PendingQueue` must hand out, op for op."""

    name: str
    strategy: QueueingStrategy
    # Whether workloads alike in priority and pod sets fare alike here. Not so when
    # LowerOrNewerEqualPriority makes the creation time matter for preemption.
    equivalence: bool = True
    # (order, push number, workload): a re-pushed workload (e.g. what it would commit of
    # a budget changed) leaves a stale entry of the same order behind, so entries
    # never fall through to comparing workloads.
    heap: list[tuple[QueueKey, int, Workload]] = field(default_factory=list)
    pushes: Iterator[int] = field(default_factory=itertools.count)
    active: dict[str, Workload] = field(default_factory=dict)
    inadmissible: dict[str, Workload] = field(default_factory=dict)
    # A BestEffortFIFO preemptor waiting for its victims stays at the front (Kueue's
    # sticky workload), so the quota it freed is not taken by whoever comes next.
    sticky: str | None = None
    # Equivalence classes known not to fit since quota was last released here.
    blocked: set[Hashable] = field(default_factory=set)
    by_class: dict[Hashable, dict[str, Workload]] = field(default_factory=dict)
    # The equivalence key of each workload waiting here: a set-aside workload is pushed
    # again every time quota is released in its cohort, and its key is not cheap.
    keys: dict[str, tuple[Workload, Hashable]] = field(default_factory=dict)

    def _key(self, workload: Workload) -> Hashable:
        known = self.keys.get(workload.name)
        if known is not None and known[0] is workload:
            return known[1]
        key = equivalence_key(workload)
        self.keys[workload.name] = (workload, key)
        return key

    def push(self, workload: Workload) -> None:
        self.inadmissible.pop(workload.name, None)
        key = self._key(workload)
        if key in self.blocked:
            self.inadmissible[workload.name] = workload
            return
        self._activate(workload, key)
        heapq.heappush(self.heap, (queue_key(workload), next(self.pushes), workload))

    def _activate(self, workload: Workload, key: Hashable) -> None:
        self.active[workload.name] = workload
        self.by_class.setdefault(key, {})[workload.name] = workload

    def _deactivate(self, workload: Workload) -> None:
        del self.active[workload.name]
        members = self.by_class.get(self._key(workload))
        if members is not None:
            members.pop(workload.name, None)

    def pop(self) -> Workload | None:
        """Take the head out of the queue (it is *in flight* until requeued)."""
        sticky, self.sticky = self.sticky, None
        if sticky is not None and sticky in self.active:
            workload = self.active[sticky]
            self._take(workload)
            return workload
        while self.heap:
            _, _, workload = heapq.heappop(self.heap)
            # Entries of deleted or re-pushed workloads stay in the heap; skip them.
            if self.active.get(workload.name) is workload:
                self._take(workload)
                return workload
        return None

    def _take(self, workload: Workload) -> None:
        self._deactivate(workload)
        del self.keys[workload.name]

    def set_aside(self, workload: Workload, *, with_equivalents: bool) -> list[str]:
        """Set a head aside; with ``with_equivalents`` also every pending workload that
        would fare the same. Returns the names of those equivalents."""
        self.inadmissible[workload.name] = workload
        if not with_equivalents or not self.equivalence:
            return []
        key = self._key(workload)
        self.blocked.add(key)
        moved = list(self.by_class.pop(key, {}).values())
        for other in moved:
            del self.active[other.name]
            self.inadmissible[other.name] = other
        return [w.name for w in moved]

    def requeue_inadmissible(self) -> bool:
        self.blocked.clear()
        if not self.inadmissible:
            return False
        # As many pushes, in the same order (so the same push numbers break the same
        # ties), but the heap rebuilt once when they are many: quota released in a busy
        # cohort brings back thousands of set-aside workloads at a time.
        returning, self.inadmissible = self.inadmissible, {}
        entries = []
        for workload in returning.values():
            self._activate(workload, self._key(workload))
            entries.append((queue_key(workload), next(self.pushes), workload))
        if len(entries) * 4 < len(self.heap):
            for entry in entries:
                heapq.heappush(self.heap, entry)
        else:
            self.heap.extend(entries)
            self._compact()
        return True

    def _compact(self) -> None:
        """The heap without the entries ``pop`` would skip, each waiting workload's
        first entry kept (its others share its order and would be skipped too)."""
        live: dict[str, tuple[QueueKey, int, Workload]] = {}
        for entry in self.heap:
            workload = entry[2]
            if self.active.get(workload.name) is workload:
                first = live.get(workload.name)
                if first is None or entry[1] < first[1]:
                    live[workload.name] = entry
        self.heap = list(live.values())
        heapq.heapify(self.heap)

    def remove(self, name: str) -> bool:
        workload = self.active.get(name)
        if workload is not None:
            self._take(workload)
            return True
        workload = self.inadmissible.pop(name, None)
        if workload is None:
            return False
        self.keys.pop(name, None)
        return True

    def workloads(self) -> Iterator[Workload]:
        yield from self.active.values()
        yield from self.inadmissible.values()
