"""The cyclic garbage collector is off while an admission cycle runs, and as it was after;
and what the cycle's preemption searches collected is gone when it ends.

The engine reads its clock inside the cycle, so a clock that looks at the collector
sees what the cycle's own work sees."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from quota import QuotaConfig, QuotaEngine
from tests.quota.test_engine import gpu_queue, job


class WatchingClock:
    """A clock that notes whether the collector is on each time it is read, and can
    fail instead of answering."""

    def __init__(self) -> None:
        self.seen: list[bool] = []
        self.fail = False
        self._ticks = iter(range(1, 10**6))

    def __call__(self) -> float:
        self.seen.append(gc.isenabled())
        if self.fail:
            raise RuntimeError("the clock stopped")
        return float(next(self._ticks))


@pytest.fixture
def collector_on() -> Iterator[None]:
    was_on = gc.isenabled()
    gc.enable()
    yield
    if not was_on:
        gc.disable()


def engine_with(clock: WatchingClock) -> QuotaEngine:
    """One queue of four GPUs, a two-GPU job waiting."""
    config = QuotaConfig(flavors=("h100",), cohorts=(), cluster_queues=(gpu_queue("a", 4),))
    engine = QuotaEngine(config, clock=clock)
    engine.add(job("w", "a", 2))
    return engine


@pytest.mark.usefixtures("collector_on")
def test_off_during_a_cycle_and_on_again_after() -> None:
    clock = WatchingClock()
    engine = engine_with(clock)
    cycle = engine.schedule_once()
    assert cycle.admitted == ["w"]
    assert clock.seen == [False]
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_on")
def test_on_again_when_a_cycle_fails() -> None:
    clock = WatchingClock()
    engine = engine_with(clock)
    clock.fail = True
    with pytest.raises(RuntimeError, match="the clock stopped"):
        engine.schedule_once()
    assert clock.seen == [False]
    assert gc.isenabled()


def test_left_off_when_it_was_off() -> None:
    was_on = gc.isenabled()
    gc.disable()
    try:
        clock = WatchingClock()
        engine_with(clock).schedule_once()
        assert clock.seen == [False]
        assert not gc.isenabled()
    finally:
        if was_on:
            gc.enable()


def test_what_a_nomination_stage_collects_does_not_outlive_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The preemption searches' merged candidates (:class:`_Sequence`) hold only while
    usage stands still; kept past the cycle, every young collection after it would walk
    them (thousands per cycle over thousands of queues)."""
    import random

    from bench.admission import build_config, build_workloads
    from quota.preemption import classical

    built = 0
    sequence = classical.CandidateIndex.sequence

    def counted(self: classical.CandidateIndex, *args: object) -> classical._Sequence:
        nonlocal built
        built += 1
        return sequence(self, *args)  # type: ignore[arg-type]  # the same arguments

    monkeypatch.setattr(classical.CandidateIndex, "sequence", counted)
    engine = QuotaEngine(build_config(20, preemption=True), clock=WatchingClock())
    for workload in build_workloads(600, 20, random.Random(3)):
        engine.add(workload)
    for _ in engine.cycles(60):
        alive = [o for o in gc.get_objects() if isinstance(o, classical._Sequence)]
        assert alive == []
    assert built > 0
