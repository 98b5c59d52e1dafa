"""Live state benchmark: what `GET /api/v1/admin/queues` and `/cohorts` cost once the
admission pass has built its engine.

Q queues (ten per cohort, under one root), A admitted workloads holding quota (so some
queues borrow and others lend), P pending ones. Times :func:`summarize` (done once per
pass, when first asked for) and the encoding of one page of 100 queues and of every
cohort. Prints one JSON line: queues, admitted, pending, summarize_ms, queues_page_ms,
cohorts_ms.

    python bench/live_state.py --queues 1000 --admitted 20000 --pending 80000
"""

from __future__ import annotations

import argparse
import json
import random
import time
from datetime import UTC, datetime, timedelta

import msgspec

from gateway.admin.live import CohortOut, LevelOut, OldestOut, QueueOut
from gateway.admission.state import summarize
from quota import QuotaEngine
from quota.config import parse_quota_config
from quota.model import Admission, PodSet, PodSetAssignment, Workload
from tenants.models import WorkloadRow

GPU = "nvidia.com/gpu"


def config(queues: int) -> dict[str, object]:
    cohorts = [{"name": "org"}] + [
        {"name": f"c-{i}", "parent": "org"} for i in range((queues + 9) // 10)
    ]
    return {
        "flavors": ["h100"],
        "cohorts": cohorts,
        "cluster_queues": [
            {
                "name": f"q-{i:05d}",
                "cohort": f"c-{i // 10}",
                "resource_groups": [
                    {
                        "resources": [GPU],
                        "flavors": [{"name": "h100", "quotas": {GPU: {"nominal": 64}}}],
                    }
                ],
            }
            for i in range(queues)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--admitted", type=int, default=20000)
    parser.add_argument("--pending", type=int, default=80000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    engine = QuotaEngine(parse_quota_config(config(args.queues)))
    names = sorted(engine.state.queues)
    # Every other queue busy: the busy ones borrow what their idle neighbours lend.
    busy = names[::2]
    for i in range(args.admitted):
        queue = busy[i % len(busy)]
        engine.add_admitted(
            Workload(f"a-{i}", queue, (PodSet("main", 1, {GPU: 1000 * rng.randint(1, 8)}),)),
            Admission(queue, (PodSetAssignment("main", 1, {GPU: "h100"}),)),
        )
    start = datetime(2026, 11, 1, tzinfo=UTC)
    rows = {}
    for i in range(args.pending):
        queue = rng.choice(names)
        created = start + timedelta(seconds=i)
        engine.add(
            Workload(
                f"p-{i}", queue, (PodSet("main", 1, {GPU: 1000}),), created=created.timestamp()
            )
        )
        if i < 2000:  # only the oldest are looked up
            rows[f"p-{i}"] = WorkloadRow(
                id=f"p-{i}", tenant="t", name=f"p-{i}", queue=queue, spec={}, created_at=created
            )
    began = time.perf_counter()
    summary = summarize(engine, rows, as_of=start, source="bench", opened={})
    summarized = time.perf_counter() - began

    began = time.perf_counter()
    page = [
        QueueOut(
            q.name,
            q.cohort,
            list(q.tenants),
            q.admitted,
            q.pending,
            OldestOut.of(q.oldest_pending),
            [LevelOut.of(level) for level in q.levels],
        )
        for q in (summary.queues[name] for name in names[:100])
    ]
    msgspec.json.encode(page)
    paged = time.perf_counter() - began

    began = time.perf_counter()
    msgspec.json.encode([CohortOut.of(c) for c in summary.cohorts.values()])
    cohorts = time.perf_counter() - began
    print(
        json.dumps(
            {
                "queues": args.queues,
                "admitted": args.admitted,
                "pending": args.pending,
                "summarize_ms": round(summarized * 1000, 2),
                "queues_page_ms": round(paged * 1000, 2),
                "cohorts_ms": round(cohorts * 1000, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
