"""Pending workloads, one ordered queue per cluster queue (Kueue's ``pkg/cache/queue``).

Order inside a queue: higher priority first, then earlier ``created``, then name.
A BestEffortFIFO head that does not fit is set aside as *inadmissible* so the
next workload can be tried; it comes back when quota is released in its cohort
tree. A StrictFIFO head stays at the front and blocks its queue.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from quota.model import QueueingStrategy, Workload

__all__ = ["PendingQueue", "QueueManager", "queue_key"]

QueueKey = tuple[int, float, str]


def queue_key(workload: Workload) -> QueueKey:
    return (-workload.priority, workload.created, workload.name)


@dataclass
class PendingQueue:
    name: str
    strategy: QueueingStrategy
    heap: list[tuple[QueueKey, Workload]] = field(default_factory=list)
    active: dict[str, Workload] = field(default_factory=dict)
    inadmissible: dict[str, Workload] = field(default_factory=dict)

    def push(self, workload: Workload) -> None:
        self.inadmissible.pop(workload.name, None)
        self.active[workload.name] = workload
        heapq.heappush(self.heap, (queue_key(workload), workload))

    def pop(self) -> Workload | None:
        """Take the head out of the queue (it is *in flight* until requeued)."""
        while self.heap:
            _, workload = heapq.heappop(self.heap)
            # Entries of deleted or re-pushed workloads stay in the heap; skip them.
            if self.active.get(workload.name) is workload:
                del self.active[workload.name]
                return workload
        return None

    def set_aside(self, workload: Workload) -> None:
        self.inadmissible[workload.name] = workload

    def requeue_inadmissible(self) -> bool:
        if not self.inadmissible:
            return False
        for workload in list(self.inadmissible.values()):
            self.push(workload)
        return True

    def remove(self, name: str) -> bool:
        return (
            self.active.pop(name, None) is not None or self.inadmissible.pop(name, None) is not None
        )

    def __len__(self) -> int:
        return len(self.active) + len(self.inadmissible)

    def workloads(self) -> Iterator[Workload]:
        yield from self.active.values()
        yield from self.inadmissible.values()


class QueueManager:
    """All pending queues; hands out one head per queue for each cycle."""

    def __init__(self, strategies: Iterable[tuple[str, QueueingStrategy]]) -> None:
        self.queues = {name: PendingQueue(name, strategy) for name, strategy in strategies}
        self._ready: set[str] = set()  # queues that may have an active head

    def add(self, workload: Workload) -> None:
        self.queues[workload.cluster_queue].push(workload)
        self._ready.add(workload.cluster_queue)

    def remove(self, workload: Workload) -> bool:
        return self.queues[workload.cluster_queue].remove(workload.name)

    def heads(self, skip: Iterable[str] = ()) -> list[Workload]:
        """Pop the head of every queue with active workloads, except those in ``skip``."""
        skipped = set(skip)
        heads = []
        for name in sorted(self._ready):
            if name in skipped:
                continue
            head = self.queues[name].pop()
            if head is None:
                self._ready.discard(name)
            else:
                heads.append(head)
        return heads

    def requeue(self, workload: Workload, *, immediate: bool) -> None:
        """Return a head that was not admitted: to the front, or set aside."""
        queue = self.queues[workload.cluster_queue]
        if immediate or queue.strategy is QueueingStrategy.STRICT_FIFO:
            queue.push(workload)
            self._ready.add(queue.name)
        else:
            queue.set_aside(workload)

    def requeue_inadmissible(self, queue_names: Iterable[str]) -> None:
        for name in queue_names:
            if self.queues[name].requeue_inadmissible():
                self._ready.add(name)

    def has_active(self, skip: Iterable[str] = ()) -> bool:
        skipped = set(skip)
        return any(self.queues[n].active for n in self._ready if n not in skipped)

    def pending(self) -> Iterator[Workload]:
        for queue in self.queues.values():
            yield from queue.workloads()
