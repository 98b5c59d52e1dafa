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


@settings(max_examples=300, deadline=None)
@given(operations)
def test_the_head_is_always_the_best_active_workload(ops: list[tuple[Any, ...]]) -> None:
    queue = PendingQueue("q", QueueingStrategy.BEST_EFFORT_FIFO)
    active: dict[str, Workload] = {}  # what the queue should hand out, by name
    aside: dict[str, Workload] = {}  # set aside, back on the next requeue
    blocked: set[tuple[int, int]] = set()  # (priority, GPUs) known not to fit
    for op in ops:
        match op:
            case ("push", number, priority, gpus):
                workload = _workload(int(number), int(priority), int(gpus))
                if workload.name in active:
                    continue
                aside.pop(workload.name, None)
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
                # Not admitted: set aside, with every workload alike when asked.
                moved = queue.set_aside(head, with_equivalents=bool(alike))
                aside[head.name] = head
                if alike:
                    blocked.add((head.priority, head.pod_sets[0].requests[GPU] // 1000))
                for name in moved:
                    aside[name] = active.pop(name)
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
        assert {w.name for w in queue.workloads()} == set(active) | set(aside)
    # Drained, the queue hands out what is active in order, each once.
    drained = []
    while (head := queue.pop()) is not None:
        drained.append(head)
    assert drained == sorted(active.values(), key=queue_key)
