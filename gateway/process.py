"""The garbage collector of a process that serves or runs the engine.

CPython's cyclic collector starts a young collection every 700 net allocations and
promotes what survives two of them. An admission cycle over a thousand queues keeps
each head's nomination (entry, assignment, flavor choices: about fifteen objects)
alive until the cycle ends, so most of them outlive two young collections, are
promoted, and then die in the oldest generation, where they count towards the next
full collection: a walk of the whole heap that finds nothing to free. Measured with
``bench/admission.py --preemption --completions`` at 100,000 workloads over 1,000
queues: 19 full collections, a third of the run. A young generation of 50,000 objects
lets a cycle's objects die young: no full collection, the collector under 1 % of the run
(README, "Benchmark: admission").

The engine turns the collector off while a cycle runs. What a cycle leaves for the
next (requeued heads' entries, pending reasons, scan states) grows with the queues
that have a head, and most of it dies during the next cycle. Over 10,000 queues a cycle
left more than 50,000 such objects, so a young collection followed every cycle and
walked all of them before they died: a sixth of the run at 1,000,000 workloads over
10,000 queues. The threshold is therefore at least :data:`YOUNG_PER_QUEUE` per
cluster queue, which leaves it at 50,000 up to 1,000 queues. ``ignara serve`` applies it
when it starts and again at each config load (``Services.on_queues``).
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_PER_QUEUE", "settle_the_heap", "tune_collector"]

YOUNG_PER_QUEUE = 50


def tune_collector(young_threshold: int, *, queues: int = 0) -> None:
    """Collect the young generation every ``young_threshold`` net allocations, or every
    :data:`YOUNG_PER_QUEUE` per cluster queue of an engine over ``queues`` if that is
    more (the older generations' thresholds unchanged)."""
    if young_threshold < 1:
        raise ValueError(
            f"the young generation's threshold must be positive, not {young_threshold}"
        )
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(max(young_threshold, YOUNG_PER_QUEUE * queues), middle, oldest)


def settle_the_heap() -> None:
    """Move what start-up made (modules, the app and its routes, the settings) out of
    the cyclic GC's reach: a full collection otherwise walks that whole heap again and
    again under load (measured: 0.1 s per collection, 3-4% of the CPU) for objects
    that live as long as the process."""
    gc.collect()
    gc.freeze()
