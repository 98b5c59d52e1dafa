"""Admission engine benchmark: play N pending workloads over Q queues to quiescence.

Prints one JSON line: workloads, queues, drain_s (wall), drain_cpu_s, cycles, cycle_p50_ms,
cycle_p99_ms, admitted, preempted, admitted_per_s, peak_rss_mb, and the garbage collector's
share of the timed part (gc_cpu_s, gc_full_collections) under the young-generation threshold
``ignara serve`` runs with over as many queues (gc_young_threshold; ``--gc-young-threshold
700`` for CPython's, which the floor of 50 per queue then raises).

The tree has two levels: a root cohort ``org`` with one cohort per ten queues;
each queue has nominal GPU quota in two flavors with a borrowing limit. With
``--preemption`` queues also preempt by priority and reclaim within the cohort.
Workloads are gangs of 1-8 pods of 1-2 GPUs plus CPU, with priorities 0-3,
spread over the queues.

With ``--budgets`` the same workloads are played in one process, plain and with
GPU-hour budgets (every queue and cohort has one, every workload a max runtime of 1-8
h, the budget clock advancing a minute per cycle), alternately ``--repeat`` times (a
shared machine drifts; pairs side by side do not), and the medians of both are printed
with their ratio. ``--completions`` plays churn instead of a drain: workloads arrive over time
(1.5 per queue per cycle, about 1.7 times what the tree admits), every admitted workload
finishes after as many cycles as its max runtime has hours (1-8), and the run goes on until
every workload has finished (or ``--max-cycles``); with ``--preemption`` that is arrivals,
admissions, completions and evictions all the time, as a trace replay is. The backlog grows
while workloads arrive: at its peak about 0.4 N wait, so N workloads also mean N times the
live state. ``--estimates N`` times N
what-if estimates (engine built from the state, the candidate added, scheduled, played
forward) against that many pending workloads.

    python bench/admission.py --workloads 10000 --queues 100
    python bench/admission.py --workloads 10000 --queues 100 --budgets
    python bench/admission.py --workloads 10000 --queues 100 --preemption --completions
    python bench/admission.py --workloads 1000 --queues 100 --estimates 50
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from fractions import Fraction

from bench import huge_arenas
from gateway.process import tune_collector
from gateway.settings import ServerSettings
from quota import (
    ClusterQueueSpec,
    CohortSpec,
    CycleResult,
    FlavorQuotas,
    PodSet,
    PreemptionPolicy,
    QuotaConfig,
    QuotaEngine,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from quota.forecast import forecast
from quota.model import ReclaimWithinCohort, WithinClusterQueue

GPU, CPU, GPU_HOURS = "nvidia.com/gpu", "cpu", "nvidia.com/gpu-hours"
K = 1000  # milli-units per unit
START = datetime(2026, 11, 1, tzinfo=UTC)


def _budget(nominal: int) -> dict[str, ResourceQuota]:
    return {GPU_HOURS: ResourceQuota(nominal=nominal * K, borrowing_limit=nominal * K)}


def build_config(queues: int, preemption: bool, budgets: bool = False) -> QuotaConfig:
    policy = (
        PreemptionPolicy(
            within_cluster_queue=WithinClusterQueue.LOWER_PRIORITY,
            reclaim_within_cohort=ReclaimWithinCohort.ANY,
        )
        if preemption
        else PreemptionPolicy()
    )
    extra = (GPU_HOURS,) if budgets else ()
    cohorts = [CohortSpec(name="org", resource_groups=_cohort_groups(budgets, 200_000))]
    specs = []
    for q in range(queues):
        cohort = f"group-{q // 10}"
        if q % 10 == 0:
            cohorts.append(
                CohortSpec(
                    name=cohort, parent="org", resource_groups=_cohort_groups(budgets, 10_000)
                )
            )
        group = ResourceGroup(
            resources=(GPU, CPU, *extra),
            flavors=(
                FlavorQuotas(
                    "h100",
                    {
                        GPU: ResourceQuota(nominal=16 * K, borrowing_limit=8 * K),
                        CPU: ResourceQuota(nominal=256 * K),
                        **(_budget(2_000) if budgets else {}),
                    },
                ),
                FlavorQuotas(
                    "a100",
                    {
                        GPU: ResourceQuota(nominal=8 * K, borrowing_limit=8 * K),
                        CPU: ResourceQuota(nominal=128 * K),
                        **(_budget(1_000) if budgets else {}),
                    },
                ),
            ),
        )
        specs.append(
            ClusterQueueSpec(
                name=f"team-{q}",
                cohort=cohort,
                resource_groups=(group,),
                preemption=policy,
            )
        )
    return QuotaConfig(
        flavors=("h100", "a100"), cohorts=tuple(cohorts), cluster_queues=tuple(specs)
    )


def _cohort_groups(budgets: bool, hours: int) -> tuple[ResourceGroup, ...]:
    """A cohort's own GPU-hour budget (and no GPUs of its own)."""
    if not budgets:
        return ()
    return (
        ResourceGroup(
            resources=(GPU, GPU_HOURS),
            flavors=tuple(
                FlavorQuotas(f, {GPU: ResourceQuota(0), GPU_HOURS: ResourceQuota(hours * K)})
                for f in ("h100", "a100")
            ),
        ),
    )


def build_workloads(n: int, queues: int, rng: random.Random) -> list[Workload]:
    workloads = []
    for i in range(n):
        pods = rng.choice((1, 1, 2, 4, 8))
        workloads.append(
            Workload(
                name=f"w{i}",
                cluster_queue=f"team-{rng.randrange(queues)}",
                priority=rng.randrange(4),
                created=float(i),
                max_runtime=Fraction(rng.randint(1, 8) * 3600),
                pod_sets=(
                    PodSet(
                        name="workers",
                        count=pods,
                        requests={GPU: rng.choice((1, 2)) * K, CPU: 8 * K},
                    ),
                ),
            )
        )
    return workloads


class CollectorClock:
    """CPU time the garbage collector takes while it is on (``gc.callbacks``), and how
    many full collections: a cost of the engine's allocations that also grows with the
    whole heap and with how long a cycle keeps its objects alive."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._started = 0.0

    def start(self) -> CollectorClock:
        gc.callbacks.append(self._observe)
        return self

    def stop(self) -> None:
        gc.callbacks.remove(self._observe)

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.process_time()
            return
        self.seconds += time.process_time() - self._started
        self.full += info["generation"] == 2

    def figures(self) -> dict[str, object]:
        return {
            "gc_young_threshold": gc.get_threshold()[0],
            "gc_cpu_s": round(self.seconds, 3),
            "gc_full_collections": self.full,
        }


def run(
    n: int, queues: int, seed: int, preemption: bool = False, budgets: bool = False
) -> dict[str, object]:
    rng = random.Random(seed)
    config = build_config(queues, preemption, budgets)
    workloads = build_workloads(n, queues, rng)
    clock = iter(range(10**9))
    engine = QuotaEngine(config, clock=lambda: float(next(clock)), now=START)
    for workload in workloads:
        engine.add(workload)
    # The engine holds what it needs (with budgets: a copy asking for its commitment);
    # keeping the submitted objects too would only feed the garbage collector.
    del workloads, workload
    # Setup's garbage (with budgets: the submitted workloads each replaced by what it
    # would commit) is collected before the clock starts, so the drain pays only for
    # what draining allocates, in both modes alike.
    gc.collect()
    durations = []
    admitted = preempted = 0
    cycles = engine.cycles()
    collector = CollectorClock().start()
    start, cpu_start = time.perf_counter(), time.process_time()
    while True:
        t0 = time.perf_counter()
        cycle = next(cycles, None)
        if cycle is None:
            break
        durations.append(time.perf_counter() - t0)
        admitted += len(cycle.admitted)
        preempted += len(cycle.preempted)
        if budgets:
            engine.advance_to(engine.now + timedelta(minutes=1))
    drain = time.perf_counter() - start
    # CPU time too: on a shared machine the wall clock also counts others' work.
    drain_cpu = time.process_time() - cpu_start
    collector.stop()
    durations.sort()
    p99 = durations[min(len(durations) - 1, int(len(durations) * 0.99))]
    return {
        "workloads": n,
        "queues": queues,
        "preemption": preemption,
        "budgets": budgets,
        "drain_s": round(drain, 3),
        "drain_cpu_s": round(drain_cpu, 3),
        "cycles": len(durations),
        "cycle_p50_ms": round(statistics.median(durations) * 1000, 3),
        "cycle_p99_ms": round(p99 * 1000, 3),
        "admitted": admitted,
        "admitted_final": len(engine.admitted),
        "preempted": preempted,
        "admitted_per_s": round(admitted / drain, 1) if drain else 0.0,
        **collector.figures(),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


class Churn:
    """The churn's plan for ``workloads`` over ``queues``: 1.5 arrivals per queue per
    cycle, and every admitted run ending after as many cycles as its max runtime has
    hours. Made before the clock starts; :meth:`cycles` plays it."""

    def __init__(self, workloads: list[Workload], queues: int) -> None:
        self.runtime = {w.name: int((w.max_runtime or 3600) // 3600) for w in workloads}
        per_cycle = max(1, 3 * queues // 2)
        self.arrivals = [workloads[i : i + per_cycle] for i in range(0, len(workloads), per_cycle)]
        self.arrivals.reverse()

    def cycles(self, engine: QuotaEngine) -> Iterator[tuple[CycleResult, int]]:
        """Each cycle: its arrivals, the cycle, then the runs due to end (unless evicted
        meanwhile). Yields its result and how many runs ended, until every workload has
        finished."""
        arrivals, runtime = self.arrivals, self.runtime
        ends: dict[int, list[str]] = {}
        cycles = 0
        while arrivals or engine.admitted or next(engine.pending(), None):
            for workload in arrivals.pop() if arrivals else ():
                engine.add(workload)
            cycle = engine.schedule_once()
            cycles += 1
            for name in cycle.admitted:
                ends.setdefault(cycles + runtime[name], []).append(name)
            ended = 0
            for name in ends.pop(cycles, ()):
                if name in engine.admitted:
                    engine.finish(name)
                    ended += 1
            yield cycle, ended


def churn(n: int, queues: int, seed: int, preemption: bool, max_cycles: int) -> dict[str, object]:
    """Admissions, completions (and evictions) until every workload has finished."""
    rng = random.Random(seed)
    config = build_config(queues, preemption)
    plan = Churn(build_workloads(n, queues, rng), queues)
    clock = iter(range(10**9))
    engine = QuotaEngine(config, clock=lambda: float(next(clock)), now=START)
    gc.collect()
    played = plan.cycles(engine)
    durations = []
    admitted = preempted = completed = 0
    collector = CollectorClock().start()
    start, cpu_start = time.perf_counter(), time.process_time()
    while len(durations) < max_cycles:
        t0 = time.perf_counter()
        step = next(played, None)
        if step is None:
            break
        cycle, ended = step
        durations.append(time.perf_counter() - t0)
        admitted += len(cycle.admitted)
        preempted += len(cycle.preempted)
        completed += ended
    cycles = len(durations)
    drain = time.perf_counter() - start
    drain_cpu = time.process_time() - cpu_start
    collector.stop()
    durations.sort()
    return {
        "workloads": n,
        "queues": queues,
        "preemption": preemption,
        "completions": True,
        "drain_s": round(drain, 3),
        "drain_cpu_s": round(drain_cpu, 3),
        "cycles": cycles,
        "cut_short": cycles >= max_cycles,
        "cycle_p50_ms": round(statistics.median(durations) * 1000, 3),
        "cycle_p99_ms": round(
            durations[min(len(durations) - 1, int(len(durations) * 0.99))] * 1000, 3
        ),
        "admitted": admitted,
        "completed": completed,
        "preempted": preempted,
        **collector.figures(),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def estimates(
    n: int, queues: int, seed: int, count: int, preemption: bool = False
) -> dict[str, object]:
    """``count`` estimates, each on a fresh engine holding ``n`` workloads (what the
    endpoint does after reading its snapshot, which is not timed here)."""
    rng = random.Random(seed)
    config = build_config(queues, preemption, budgets=True)
    workloads = build_workloads(n, queues, rng)
    candidates = build_workloads(count, queues, random.Random(seed + 1))
    timings = []
    waiting = 0
    for i, candidate in enumerate(candidates):
        t0 = time.perf_counter()
        engine = QuotaEngine(config, now=START)
        for workload in workloads:
            engine.add(workload)
        engine.add(
            Workload(
                f"candidate-{i}",
                candidate.cluster_queue,
                candidate.pod_sets,
                max_runtime=candidate.max_runtime,
                created=float(n + i),
            )
        )
        engine.schedule()
        waiting = sum(1 for _ in engine.pending())
        forecast(engine)
        timings.append(time.perf_counter() - t0)
    timings.sort()
    return {
        "workloads": n,
        "queues": queues,
        "estimates": count,
        "pending_after_admission": waiting,
        "estimate_p50_ms": round(statistics.median(timings) * 1000, 1),
        "estimate_p99_ms": round(timings[min(count - 1, int(count * 0.99))] * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--preemption",
        action="store_true",
        help="queues preempt lower priority within themselves and reclaim within the cohort",
    )
    parser.add_argument(
        "--budgets", action="store_true", help="also play them with GPU-hour budgets; compare"
    )
    parser.add_argument(
        "--repeat", type=int, default=5, help="with --budgets: pairs to play (medians)"
    )
    parser.add_argument("--estimates", type=int, default=0, help="time this many estimates")
    parser.add_argument(
        "--completions",
        action="store_true",
        help="admitted workloads finish after 1-8 cycles; run until all have finished",
    )
    parser.add_argument(
        "--max-cycles", type=int, default=100_000, help="with --completions: stop after this many"
    )
    parser.add_argument(
        "--gc-young-threshold",
        type=int,
        default=ServerSettings.gc_young_threshold,
        help="the collector's young generation, as `ignara serve` sets it "
        "(IGNARA_GC_YOUNG_THRESHOLD; default %(default)s, and at least 50 per queue; "
        "700 is CPython's own)",
    )
    parser.add_argument(
        "--huge-page-arenas",
        action="store_true",
        help="back pymalloc's arenas with transparent huge pages (bench/huge_arenas.py): "
        "how much of a large heap's cost is address translation",
    )
    args = parser.parse_args()
    if args.huge_page_arenas:
        huge_arenas.install()
    tune_collector(args.gc_young_threshold, queues=args.queues)
    figures = measure(args)
    if args.huge_page_arenas:
        figures["huge_page_arenas"] = huge_arenas.stats()
    print(json.dumps(figures))


def measure(args: argparse.Namespace) -> dict[str, object]:
    """The figures of the run the arguments ask for."""
    if args.completions:
        return churn(args.workloads, args.queues, args.seed, args.preemption, args.max_cycles)
    if args.estimates:
        return estimates(args.workloads, args.queues, args.seed, args.estimates, args.preemption)
    plain = run(args.workloads, args.queues, args.seed, args.preemption)
    if not args.budgets:
        return plain
    plains, budgeted = [plain], []
    for i in range(args.repeat):
        if i:
            plains.append(run(args.workloads, args.queues, args.seed, args.preemption))
        budgeted.append(run(args.workloads, args.queues, args.seed, args.preemption, budgets=True))
    timed = ("drain_s", "drain_cpu_s", "cycle_p99_ms", "cycle_p50_ms")
    medians = {
        "plain": {key: statistics.median(float(r[key]) for r in plains) for key in timed},  # type: ignore[arg-type]
        "budgets": {key: statistics.median(float(r[key]) for r in budgeted) for key in timed},  # type: ignore[arg-type]
    }
    ratio = {key: round(medians["budgets"][key] / medians["plain"][key], 3) for key in timed}
    return {
        "pairs": args.repeat,
        "plain": plains[-1],
        "budgets": budgeted[-1],
        "medians": medians,
        "budgets_over_plain": ratio,
    }


if __name__ == "__main__":
    main()
