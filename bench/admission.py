"""Admission engine benchmark: play N pending workloads over Q queues to quiescence.

Prints one JSON line: workloads, queues, drain_s, cycles, cycle_p50_ms,
cycle_p99_ms, admitted, preempted, admitted_per_s, peak_rss_mb.

The tree has two levels: a root cohort ``org`` with one cohort per ten queues;
each queue has nominal GPU quota in two flavors with a borrowing limit. With
``--preemption`` queues also preempt by priority and reclaim within the cohort.
Workloads are gangs of 1-8 pods of 1-2 GPUs plus CPU, with priorities 0-3,
spread over the queues.

    python bench/admission.py --workloads 10000 --queues 100
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import time

from quota import (
    ClusterQueueSpec,
    CohortSpec,
    FlavorQuotas,
    PodSet,
    PreemptionPolicy,
    QuotaConfig,
    QuotaEngine,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from quota.model import ReclaimWithinCohort, WithinClusterQueue

GPU, CPU = "nvidia.com/gpu", "cpu"
K = 1000  # milli-units per unit


def build_config(queues: int, preemption: bool) -> QuotaConfig:
    policy = (
        PreemptionPolicy(
            within_cluster_queue=WithinClusterQueue.LOWER_PRIORITY,
            reclaim_within_cohort=ReclaimWithinCohort.ANY,
        )
        if preemption
        else PreemptionPolicy()
    )
    cohorts = [CohortSpec(name="org")]
    specs = []
    for q in range(queues):
        cohort = f"group-{q // 10}"
        if q % 10 == 0:
            cohorts.append(CohortSpec(name=cohort, parent="org"))
        group = ResourceGroup(
            resources=(GPU, CPU),
            flavors=(
                FlavorQuotas(
                    "h100",
                    {
                        GPU: ResourceQuota(nominal=16 * K, borrowing_limit=8 * K),
                        CPU: ResourceQuota(nominal=256 * K),
                    },
                ),
                FlavorQuotas(
                    "a100",
                    {
                        GPU: ResourceQuota(nominal=8 * K, borrowing_limit=8 * K),
                        CPU: ResourceQuota(nominal=128 * K),
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


def run(n: int, queues: int, seed: int, preemption: bool = False) -> dict[str, object]:
    rng = random.Random(seed)
    config = build_config(queues, preemption)
    workloads = build_workloads(n, queues, rng)
    clock = iter(range(10**9))
    engine = QuotaEngine(config, clock=lambda: float(next(clock)))
    for workload in workloads:
        engine.add(workload)
    durations = []
    admitted = preempted = 0
    cycles = engine.cycles()
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        cycle = next(cycles, None)
        if cycle is None:
            break
        durations.append(time.perf_counter() - t0)
        admitted += len(cycle.admitted)
        preempted += len(cycle.preempted)
    drain = time.perf_counter() - start
    durations.sort()
    p99 = durations[min(len(durations) - 1, int(len(durations) * 0.99))]
    return {
        "workloads": n,
        "queues": queues,
        "preemption": preemption,
        "drain_s": round(drain, 3),
        "cycles": len(durations),
        "cycle_p50_ms": round(statistics.median(durations) * 1000, 3),
        "cycle_p99_ms": round(p99 * 1000, 3),
        "admitted": admitted,
        "admitted_final": len(engine.admitted),
        "preempted": preempted,
        "admitted_per_s": round(admitted / drain, 1) if drain else 0.0,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
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
    args = parser.parse_args()
    print(json.dumps(run(args.workloads, args.queues, args.seed, args.preemption)))


if __name__ == "__main__":
    main()
