"""An engine lives as long as its gateway: what it keeps between cycles must not keep
the runs that ended. The preemption searches (classical and fair sharing) keep rankings
of each queue's workloads and whole search results across cycles; once stale, those
would hold the records (workload, admission, usage) of runs long over, thousands in a
busy tree."""

from __future__ import annotations

import gc
import itertools
import random
from dataclasses import replace

import pytest

from bench.admission import Churn, build_config, build_workloads
from quota.cache import AdmittedWorkload
from quota.engine import QuotaEngine
from tests.quota.test_properties import TickClock


def _records_alive() -> set[str]:
    gc.collect()
    return {o.name for o in gc.get_objects() if isinstance(o, AdmittedWorkload)}


@pytest.mark.parametrize("fair", [False, True], ids=["classical", "fair-sharing"])
@pytest.mark.parametrize("reference", [False, True], ids=["fast", "reference"])
def test_no_record_of_an_ended_run_outlives_the_next_cycle(reference: bool, fair: bool) -> None:
    config = replace(build_config(20, preemption=True), fair_sharing=fair)
    engine = QuotaEngine(config, clock=TickClock(), reference_preemption=reference)
    # bench/admission.py's churn, small: arrivals each cycle, every admitted run ending
    # after 1-8 cycles, until all have ended.
    played = Churn(build_workloads(1500, 20, random.Random(5)), 20).cycles(engine)
    assert sum(len(cycle.preempted) for cycle, _ in itertools.islice(played, 1000)) > 20
    assert not engine.admitted and next(engine.pending(), None) is None
    engine.schedule_once()  # the next cycle: nothing is left to admit
    # The kept search results are swept only when their store has doubled (a busy
    # gateway's is thousands); here the sweep is asked for.
    engine._scheduler.preemptor._sweep_kept()
    assert _records_alive() == set()


def test_a_running_workload_keeps_its_record() -> None:
    """The check above can see a record: one still running is found."""
    engine = QuotaEngine(build_config(2, preemption=True), clock=TickClock())
    (workload,) = build_workloads(1, 2, random.Random(1))
    engine.add(workload)
    engine.schedule_once()
    assert _records_alive() == {workload.name}
