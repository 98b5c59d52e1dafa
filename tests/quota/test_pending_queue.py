"""A cluster queue's pending order under any sequence of pushes, pops, set-asides,
requeues and removals: the head is always the best active workload by Kueue's order
(priority, then order time, then name), whatever the heap holds inside (stale entries,
a heap rebuilt when many set-aside workloads come back at once)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from quota.model import PodSet, QueueingStrategy, Workload
from quota.queues import PendingQueue, queue_key
from quota.reasons import PendingReason, ReasonCode
from tests.quota.pending_queue_reference import ReferencePendingQueue

GPU = "nvidia.com/gpu"

operations = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 39), st.integers(0, 2), st.integers(1, 3)),
        st.tuples(st.just("pop"), st.booleans()),
        st.tuples(st.just("requeue")),
        st.tuples(st.just("remove"), st.integers(0, 39)),
    ),
    max_size=120,
)


def _workload(number: int, priority: int, gpus: int) -> Workload:
    return Workload(
        name=f"w{number:02d}",
        cluster_queue="q",
        pod_sets=(PodSet("main", 1, {GPU: gpus * 1000}),),
        priority=priority,
        created=float(number % 7),
    )


def _kind(workload: Workload) -> tuple[int, int]:
    """(priority, GPUs): what makes workloads of :func:`_workload` alike."""
    return workload.priority, workload.pod_sets[0].requests[GPU] // 1000


@settings(max_examples=300, deadline=None)
@given(operations)
def test_the_head_is_always_the_best_active_workload(ops: list[tuple[Any, ...]]) -> None:
    queue = PendingQueue("q", QueueingStrategy.BEST_EFFORT_FIFO)
    active: dict[str, Workload] = {}  # what the queue should hand out, by name
    aside: dict[str, Workload] = {}  # set aside, back on the next requeue
    blocked: set[tuple[int, int]] = set()  # (priority, GPUs) known not to fit
    told: dict[str, PendingReason] = {}  # the reason a set-aside head left its equivalents
    for op in ops:
        match op:
            case ("push", number, priority, gpus):
                workload = _workload(int(number), int(priority), int(gpus))
                if workload.name in active:
                    continue
                aside.pop(workload.name, None)
                told.pop(workload.name, None)  # it joins its class anew
                queue.push(workload)
                # Alike to a workload set aside since quota was last released: aside too.
                waiting = aside if (int(priority), int(gpus)) in blocked else active
                waiting[workload.name] = workload
            case ("pop", alike):
                head = queue.pop()
                expected = min(active.values(), key=queue_key, default=None)
                assert head is expected
                if head is None:
                    continue
                del active[head.name]
                told.pop(head.name, None)  # handed out: the engine gives it its own
                # Not admitted: set aside, with every workload alike when asked.
                reason = PendingReason(ReasonCode.INSUFFICIENT_QUOTA, f"{head.name} did not fit")
                moved = queue.set_aside(head, with_equivalents=bool(alike), reason=reason)
                assert moved == bool(alike)
                aside[head.name] = head
                if alike:
                    kind = _kind(head)
                    blocked.add(kind)
                    for name, workload in list(active.items()):
                        if _kind(workload) == kind:
                            aside[name] = active.pop(name)
                            told[name] = reason
            case ("requeue",):
                queue.requeue_inadmissible()
                active.update(aside)
                aside.clear()
                blocked.clear()
            case ("remove", number):
                name = f"w{int(number):02d}"
                removed = queue.remove(name)
                assert removed == (name in active or name in aside)
                active.pop(name, None)
                aside.pop(name, None)
                told.pop(name, None)
        assert {w.name for w in queue.workloads()} == set(active) | set(aside)
        for name in set(active) | set(aside):
            assert queue.reason(name) is told.get(name), name
    # Drained, the queue hands out what is active in order, each once.
    drained = []
    while (head := queue.pop()) is not None:
        drained.append(head)
    assert drained == sorted(active.values(), key=queue_key)


# Ops as the engine and the scheduler issue them: (re)queue a workload (a waiting one
# is removed first, as the engine does), take a head and dispose of it (admitted; back
# to the front; back as a sticky preemptor; set aside alone or with its equivalents),
# release quota, remove.
differential_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("push"),
            st.integers(0, 29),
            st.integers(0, 2),
            st.integers(1, 3),
            st.integers(0, 2),
        ),
        st.tuples(
            st.just("pop"),
            st.sampled_from(["admit", "front", "sticky", "alone", "alike", "alike", "alike"]),
        ),
        st.tuples(st.just("requeue")),
        st.tuples(st.just("remove"), st.integers(0, 29)),
    ),
    max_size=200,
)


@settings(max_examples=400, deadline=None)
@given(differential_ops, st.booleans())
def test_the_queue_decides_as_the_reference_queue(
    ops: list[tuple[Any, ...]], equivalence: bool
) -> None:
    """Op for op the same heads, the same set-aside equivalents, the same answers, the
    same waiting workloads as the previous implementation (one heap of workloads)."""
    queue = PendingQueue("q", QueueingStrategy.BEST_EFFORT_FIFO, equivalence=equivalence)
    reference = ReferencePendingQueue(
        "q", QueueingStrategy.BEST_EFFORT_FIFO, equivalence=equivalence
    )
    told: dict[str, PendingReason] = {}  # the reason each equivalent set aside was left
    for op in ops:
        match op:
            case ("push", number, priority, gpus, queued):
                workload = Workload(
                    name=f"w{int(number):02d}",
                    cluster_queue="q",
                    pod_sets=(PodSet("main", 1, {GPU: int(gpus) * 1000}),),
                    priority=int(priority),
                    created=float(int(number) % 5),
                    queued=None if queued == 0 else float(queued),
                )
                assert queue.remove(workload.name) == reference.remove(workload.name)
                told.pop(workload.name, None)
                queue.push(workload)
                reference.push(workload)
            case ("pop", disposal):
                head = queue.pop()
                assert head is reference.pop()
                if head is None:
                    continue
                told.pop(head.name, None)
                if disposal == "admit":
                    continue
                if disposal in ("front", "sticky"):
                    if disposal == "sticky":
                        queue.sticky = reference.sticky = head.name
                    queue.push(head)
                    reference.push(head)
                    continue
                alike = disposal == "alike"
                reason = PendingReason(ReasonCode.INSUFFICIENT_QUOTA, f"{head.name} did not fit")
                moved = reference.set_aside(head, with_equivalents=alike)
                returned = queue.set_aside(head, with_equivalents=alike, reason=reason)
                assert returned or not moved
                told.update(dict.fromkeys(moved, reason))
            case ("requeue",):
                assert queue.requeue_inadmissible() == reference.requeue_inadmissible()
            case ("remove", number):
                name = f"w{int(number):02d}"
                assert queue.remove(name) == reference.remove(name)
                told.pop(name, None)
        waiting = sorted(w.name for w in reference.workloads())
        assert sorted(w.name for w in queue.workloads()) == waiting
        # What each waiting workload is told: what the reference's names got, eagerly.
        assert {n: queue.reason(n) for n in waiting} == {n: told.get(n) for n in waiting}
    queue.requeue_inadmissible()
    reference.requeue_inadmissible()
    while (head := queue.pop()) is not None:
        assert head is reference.pop()
    assert reference.pop() is None


def test_a_workload_that_joins_a_set_aside_class_ahead_of_it_comes_back_first() -> None:
    """A class set aside keeps its place among the heads with its next member's order;
    one alike arriving meanwhile that goes before that member must count when quota
    is released, even with the set-aside head itself gone."""
    queue = PendingQueue("q", QueueingStrategy.BEST_EFFORT_FIFO)
    first, later = _workload(10, 0, 1), _workload(12, 0, 1)  # created 3, then 5
    other = _workload(11, 0, 2)  # created 4, needs more
    for workload in (first, later, other):
        queue.push(workload)
    assert queue.pop() is first
    full = PendingReason(ReasonCode.INSUFFICIENT_QUOTA, "no room")
    assert queue.set_aside(first, with_equivalents=True, reason=full)
    assert queue.reason(later.name) is full and queue.reason(other.name) is None
    newcomer = _workload(14, 0, 1)  # created 0: ahead of everyone
    queue.push(newcomer)
    assert queue.reason(newcomer.name) is None  # not there when its class was set aside
    assert queue.remove(first.name)
    assert queue.pop() is other  # the only one not set aside
    queue.set_aside(other, with_equivalents=True)
    assert queue.requeue_inadmissible()
    assert [queue.pop(), queue.pop(), queue.pop(), queue.pop()] == [
        newcomer,
        other,
        later,
        None,
    ]


def test_workloads_alike_share_their_class_key() -> None:
    """A queue of thousands alike keeps one equivalence key for them, not one each
    (a tuple of about ten items per waiting workload), also for one that comes back
    after it was handed out."""
    queue = PendingQueue("q", QueueingStrategy.BEST_EFFORT_FIFO)
    alike = [_workload(n, 1, 2) for n in range(5)]
    different = _workload(9, 1, 3)
    for workload in (*alike, different):
        queue.push(workload)
    keys = {id(queue.keys[w.name]) for w in alike}
    assert len(keys) == 1
    assert queue.keys[different.name] != queue.keys[alike[0].name]
    head = queue.pop()
    assert head is alike[0]
    queue.push(head)
    assert queue.keys[head.name] is queue.keys[alike[1].name]


def test_a_queue_keeps_nothing_of_workloads_gone() -> None:
    """A tenant sending workloads of a new shape each time (a class each) leaves no
    class, key or shared reason behind once they are gone, handed out or removed."""
    queue = PendingQueue("q", QueueingStrategy.BEST_EFFORT_FIFO)
    shapes = [_workload(n, n % 3, n + 1) for n in range(30)]
    for workload in shapes:
        queue.push(workload)
    head = queue.pop()
    assert head is not None
    full = PendingReason(ReasonCode.INSUFFICIENT_QUOTA, "no room")
    queue.set_aside(head, with_equivalents=True, reason=full)
    for workload in shapes[::2]:
        queue.remove(workload.name)
    while queue.pop() is not None:
        pass
    queue.remove(head.name)
    assert (queue.classes, queue.keys, queue.known, queue.shared_reasons) == ({}, {}, {}, {})
