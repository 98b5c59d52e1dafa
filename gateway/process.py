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
"""

from __future__ import annotations

import gc

__all__ = ["settle_the_heap", "tune_collector"]


def tune_collector(young_threshold: int) -> None:
    """Collect the young generation every ``young_threshold`` net allocations (the
    older generations' thresholds unchanged)."""
    if young_threshold < 1:
        raise ValueError(
            f"the young generation's threshold must be positive, not {young_threshold}"
        )
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, oldest)


def settle_the_heap() -> None:
    """Move what start-up made (modules, the app and its routes, the settings) out of
    the cyclic GC's reach: a full collection otherwise walks that whole heap again and
    again under load (measured: 0.1 s per collection, 3-4% of the CPU) for objects
    that live as long as the process."""
    gc.collect()
    gc.freeze()
