"""Pending workloads, one ordered queue per cluster queue (Kueue's ``pkg/cache/queue``).

Order inside a queue: higher priority first, then earlier ``order_time`` (creation,
or the last preemption), then name.
A BestEffortFIFO head that does not fit is set aside as *inadmissible* so the
next workload can be tried; it comes back when quota is released in its cohort
tree. A StrictFIFO head stays at the front and blocks its queue.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from quota.budgets import is_budget
from quota.model import ClusterQueueSpec, QueueingStrategy, WithinClusterQueue, Workload
from quota.reasons import PendingReason

__all__ = ["PendingQueue", "QueueManager", "queue_key"]

QueueKey = tuple[int, float, str]
# A member's entry in its class's heap: its order (``queue_key``) and the entry's
# number, flat (-priority, order time, name, number). Flat, not (order, number): a
# heap compares entries all the time, and a nested tuple costs two comparisons per
# level where a flat one costs one.
_Entry = tuple[int, float, str, int]
# A class's entry in its queue's heap of heads: its head's order then, the entry's
# number, and the class key.
_Head = tuple[int, float, str, int, Hashable]


def queue_key(workload: Workload) -> QueueKey:
    return (-workload.priority, workload.order_time, workload.name)


def equivalence_key(workload: Workload) -> Hashable:
    """Workloads with the same key get the same flavor assignment and preemption
    outcome (Kueue's scheduling equivalence hash), unless a budget decided it: what
    they would commit of a budget is left out, and a head refused for a budget is set
    aside alone (see :meth:`QueueManager.requeue`).

    One flat tuple of numbers and strings: the priority, then per pod set its count,
    min count and number of requests, and those requests in order. The garbage
    collector stops tracking such a tuple at its first collection, one level of
    nesting per collection, and every entry of a class in its queue's heap holds it."""
    key: list[object] = [workload.priority]
    for pod_set in workload.pod_sets:
        requests = sorted(_concurrent(pod_set.requests))
        key += (pod_set.count, pod_set.min_count, len(requests))
        for resource, amount in requests:
            key += (resource, amount)
    return tuple(key)


def _concurrent(requests: Mapping[str, int]) -> Iterator[tuple[str, int]]:
    return ((r, v) for r, v in requests.items() if not is_budget(r))


class _Class:
    """The waiting workloads of one equivalence class of one queue, with a heap of
    their entries (an entry whose number is no longer its member's in ``live`` is
    stale, dropped when met) and, while the class has an entry in its queue's heap of
    class heads, that entry's number (``entry``) and its head's entry then
    (``entered``). The members' workloads are the queue's (``PendingQueue.known``).

    An entry holds the member's name, not the workload: a tuple of strings and
    numbers only, which the garbage collector stops tracking. Every set-aside member
    gets a new entry each time quota is released; holding the workload, each one
    lived long enough to be promoted, and their numbers brought full collections."""

    __slots__ = ("entered", "entry", "heap", "key", "live")

    def __init__(self, key: Hashable) -> None:
        self.key = key  # the one its members' ``PendingQueue.keys`` share
        self.heap: list[_Entry] = []
        self.live: dict[str, int] = {}  # member -> the number of its entry
        self.entry: int | None = None
        self.entered: _Entry | None = None

    def head(self) -> _Entry | None:
        """The best member's entry (stale entries on top dropped)."""
        heap, live = self.heap, self.live
        while heap:
            entry = heap[0]
            if live.get(entry[2]) == entry[3]:
                return entry
            heapq.heappop(heap)
        return None


@dataclass
class PendingQueue:
    """One cluster queue's waiting workloads, kept by equivalence class.

    A class set aside (its head did not fit) keeps its members and their heap as
    they are, only marked blocked; quota released in the cohort unblocks the classes
    at once. A completion so costs a step per class, not one per set-aside workload
    (a busy cohort holds thousands). :meth:`pop` hands out the best workload of the
    classes not blocked: each such class has an entry in ``heads`` whose order is at
    most its best member's; the entry met first whose order is its class's head's
    is the queue's head."""

    name: str
    strategy: QueueingStrategy
    # Whether workloads alike in priority and pod sets fare alike here. Not so when
    # LowerOrNewerEqualPriority makes the creation time matter for preemption.
    equivalence: bool = True
    classes: dict[Hashable, _Class] = field(default_factory=dict)
    # An entry whose number is no longer its class's ``entry`` is stale and skipped.
    heads: list[_Head] = field(default_factory=list)
    # Entry numbers; they also break ties between entries of one workload in a heap,
    # so entries never fall through to comparing workloads.
    numbers: Iterator[int] = field(default_factory=itertools.count)
    # Set aside alone (not with their class): back one by one on the next requeue.
    inadmissible: dict[str, Workload] = field(default_factory=dict)
    # A BestEffortFIFO preemptor waiting for its victims stays at the front (Kueue's
    # sticky workload), so the quota it freed is not taken by whoever comes next.
    sticky: str | None = None
    # Equivalence classes known not to fit since quota was last released here: their
    # members, and workloads alike that arrive meanwhile, wait in them set aside.
    blocked: set[Hashable] = field(default_factory=set)
    # Each waiting workload (active or set aside), and its equivalence key: computed
    # once, as a set-aside workload comes back every time quota is released. Two
    # dicts, not one of pairs: a pair holding a workload stays tracked by the garbage
    # collector, and one was made at every requeue.
    known: dict[str, Workload] = field(default_factory=dict)
    keys: dict[str, Hashable] = field(default_factory=dict)
    # Why a class set aside with its head waits: the class's members then share the
    # head's reason, kept once for the class (a class can hold thousands) with a number
    # drawn then. A waiting member's entry number, drawn when it joined its class, says
    # whether it was there (see :meth:`reason`).
    shared_reasons: dict[Hashable, tuple[int, PendingReason]] = field(default_factory=dict)
    # The last workload handed out and its key: it is requeued (set aside, or back to
    # the front) within the cycle, and the key need not be computed again.
    popped: Workload | None = None
    popped_key: Hashable = None

    def _key(self, workload: Workload) -> Hashable:
        name = workload.name
        if self.known.get(name) is workload:
            return self.keys[name]
        key = self.popped_key if self.popped is workload else equivalence_key(workload)
        self.known[name] = workload
        self.keys[name] = key
        return key

    def push(self, workload: Workload) -> None:
        if workload.name in self.keys:
            self._discard(workload.name)
        self._insert(workload, self._key(workload))

    def _insert(self, workload: Workload, key: Hashable) -> None:
        name = workload.name
        group = self.classes.get(key)
        if group is None:
            group = self.classes[key] = _Class(key)
        elif group.key is not key:
            self.keys[name] = key = group.key  # one tuple for a class's members, not one each
        number = next(self.numbers)
        group.live[name] = number
        entry = (-workload.priority, workload.order_time, name, number)
        heapq.heappush(group.heap, entry)
        if key in self.blocked:
            return  # its class is entered again when quota is released
        if group.entered is None or entry < group.entered:
            self._enter(key, group, entry)

    def _enter(self, key: Hashable, group: _Class, head: _Entry) -> None:
        """Give a class a (new) entry in the heap of heads, for its member ``head``;
        an older one goes stale."""
        number = next(self.numbers)
        group.entry, group.entered = number, head
        heapq.heappush(self.heads, (head[0], head[1], head[2], number, key))
        if len(self.heads) > 4 * len(self.classes) + 64:
            classes = self.classes
            self.heads = [
                e for e in self.heads if (g := classes.get(e[4])) is not None and g.entry == e[3]
            ]
            heapq.heapify(self.heads)

    def _active(self, name: str) -> Workload | None:
        """The workload of that name if it waits to be handed out."""
        workload = self.known.get(name)
        if workload is None or name in self.inadmissible or self.keys[name] in self.blocked:
            return None
        return workload

    def pop(self) -> Workload | None:
        """Take the head out of the queue (it is *in flight* until requeued)."""
        sticky, self.sticky = self.sticky, None
        if sticky is not None:
            workload = self._active(sticky)
            if workload is not None:
                self.popped, self.popped_key = workload, self.keys[sticky]
                self._discard(sticky)
                return workload
        heads, classes, blocked = self.heads, self.classes, self.blocked
        while heads:
            first = heapq.heappop(heads)
            key = first[4]
            group = classes.get(key)
            if group is None or group.entry != first[3]:
                continue  # stale: its class was entered again since
            group.entry = group.entered = None
            if key in blocked:
                continue  # entered again when quota is released
            entry = group.head()
            if entry is None:
                continue
            if entry[2] != first[2] or entry[1] != first[1] or entry[0] != first[0]:
                # Its head left (taken or removed): the class's next head competes.
                self._enter(key, group, entry)
                continue
            heapq.heappop(group.heap)
            name = entry[2]
            del group.live[name]
            workload = self.known.pop(name)
            self.popped, self.popped_key = workload, self.keys.pop(name)
            after = group.head()
            if after is not None:
                self._enter(key, group, after)
            else:
                self._drop_class(key)
            return workload
        return None

    def _discard(self, name: str) -> bool:
        """Forget a waiting workload (its heap entries go stale)."""
        if self.known.pop(name, None) is None:
            return False
        key = self.keys.pop(name)
        if self.inadmissible.pop(name, None) is not None:
            return True
        group = self.classes[key]
        del group.live[name]
        if not group.live:
            self._drop_class(key)
        elif len(group.heap) > 2 * len(group.live) + 32:
            # Many left without being handed out: drop their entries at once.
            live = group.live
            group.heap = [e for e in group.heap if live.get(e[2]) == e[3]]
            heapq.heapify(group.heap)
        return True

    def _drop_class(self, key: Hashable) -> None:
        """Its last member left (one joining later was not there for its reason)."""
        del self.classes[key]
        self.shared_reasons.pop(key, None)

    def set_aside(
        self, workload: Workload, *, with_equivalents: bool, reason: PendingReason | None = None
    ) -> bool:
        """Set a head aside; with ``with_equivalents`` also every pending workload that
        would fare the same, which then wait for the head's ``reason`` too (see
        :meth:`reason`). Whether they were set aside."""
        key = self._key(workload)
        self.inadmissible[workload.name] = workload
        if not with_equivalents or not self.equivalence or key in self.blocked:
            return False
        self.blocked.add(key)
        # Only members waiting now share it (one joining later has not waited for it),
        # and :meth:`_drop_class` forgets it with the class: kept with no class, a
        # reason would stay for as long as the queue, one per shape ever set aside.
        if reason is not None and key in self.classes:
            self.shared_reasons[key] = (next(self.numbers), reason)
        return True

    def reason(self, name: str) -> PendingReason | None:
        """The reason a waiting workload shares with its class: that of the last head
        set aside with it, if it has waited in the class since. (Handed out since, it
        has a reason of its own; come back since, it joined after.)"""
        key = self.keys.get(name)
        if key is None:
            return None
        shared = self.shared_reasons.get(key)
        if shared is None:
            return None
        group = self.classes.get(key)
        joined = group.live.get(name) if group is not None else None
        if joined is None or joined > shared[0]:
            return None  # set aside alone, or joined after
        return shared[1]

    def requeue_inadmissible(self) -> bool:
        """Quota was released in the cohort: everything set aside waits again. Whether
        anything did come back."""
        returned = bool(self.inadmissible)
        blocked, self.blocked = self.blocked, set()
        for key in blocked:
            group = self.classes.get(key)
            if group is None:
                continue
            returned = True
            entry = group.head()
            assert entry is not None  # a class is dropped when its last member leaves
            if group.entered is None or entry < group.entered:
                self._enter(key, group, entry)
        if self.inadmissible:
            returning, self.inadmissible = self.inadmissible, {}
            keys = self.keys
            for name, workload in returning.items():
                self._insert(workload, keys[name])
        return returned

    def remove(self, name: str) -> bool:
        return self._discard(name)

    def workloads(self) -> Iterator[Workload]:
        known = self.known
        for group in self.classes.values():
            yield from (known[name] for name in group.live)
        yield from self.inadmissible.values()


class QueueManager:
    """All pending queues; hands out one head per queue for each cycle."""

    def __init__(self, specs: Iterable[ClusterQueueSpec]) -> None:
        self.queues = {
            spec.name: PendingQueue(
                spec.name,
                spec.queueing_strategy,
                equivalence=spec.preemption.within_cluster_queue
                is not WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY,
            )
            for spec in specs
        }
        self._ready: set[str] = set()  # queues that may have an active head
        # Queues that may have workloads set aside: quota released in a tree of a
        # thousand queues visits only these (the others have nothing to bring back).
        self._parked: set[str] = set()

    def add(self, workload: Workload) -> None:
        self.queues[workload.cluster_queue].push(workload)
        self._ready.add(workload.cluster_queue)

    def remove(self, workload: Workload) -> bool:
        return self.queues[workload.cluster_queue].remove(workload.name)

    def heads(self, skip: Iterable[str] = ()) -> list[Workload]:
        """Pop the head of every queue with active workloads, except those in ``skip``."""
        skipped = skip if isinstance(skip, (set, frozenset)) else set(skip)
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

    def requeue(
        self,
        workload: Workload,
        *,
        immediate: bool,
        sticky: bool = False,
        alike: bool = True,
        reason: PendingReason | None = None,
    ) -> None:
        """Return a head that was not admitted: to the front, or set aside. A
        ``sticky`` one (waiting for its preemptions) stays the head of a
        BestEffortFIFO queue whatever arrives meanwhile. Set aside, it takes the
        workloads equivalent to it along (unless not ``alike``: its fate turned on
        more than the equivalence key says), and they wait for its ``reason``."""
        queue = self.queues[workload.cluster_queue]
        if sticky and queue.strategy is QueueingStrategy.BEST_EFFORT_FIFO:
            queue.sticky = workload.name
        if immediate or sticky or queue.strategy is QueueingStrategy.STRICT_FIFO:
            queue.push(workload)
            self._ready.add(queue.name)
            return
        self._parked.add(queue.name)
        queue.set_aside(workload, with_equivalents=alike, reason=reason)

    def reason(self, workload: Workload) -> PendingReason | None:
        """The reason a waiting workload shares with its class (see
        :meth:`PendingQueue.reason`)."""
        return self.queues[workload.cluster_queue].reason(workload.name)

    def requeue_inadmissible(self, queue_names: Iterable[str]) -> None:
        """Quota was released where these queues are: what they set aside waits again."""
        if not self._parked:
            return  # under churn, the usual case: released again before anything was set aside
        names = queue_names if isinstance(queue_names, (set, frozenset)) else set(queue_names)
        back = self._parked & names
        # A new set, not discards from the old one: a set keeps the table it grew to, and
        # ``&`` walks all of it (ten thousand queues parked once, then on every release).
        self._parked = self._parked - back
        for name in back:
            if self.queues[name].requeue_inadmissible():
                self._ready.add(name)

    def pending(self) -> Iterator[Workload]:
        for queue in self.queues.values():
            yield from queue.workloads()
