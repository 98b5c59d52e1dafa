"""Dispatch benchmark: N admitted gangs dispatched to a real Slurm and tracked to the end.

Starts a throwaway single-node Slurm with slurmrestd (tests/support/slurm.py: Debian
packages, root; one fake GPU per workload and --cpus claimed cores, so N tiny jobs are not
held back by this machine's two cores) and a SQLite database; submits N workloads of one
pod x one GPU running ``true`` (or ``sleep --job-seconds``, so the tracker follows running
jobs), admits them all in one admission pass (the queue's quota holds them all), then runs
the gateway's own dispatcher (gateway.admission.dispatcher, in this process, against the
real SlurmBackend) every --interval seconds until every workload has ended, as
``ignara serve`` does.

Prints one JSON line:

- ``submit_s``, ``submissions_per_s``: from the first dispatcher pass to the moment every
  job was submitted to slurmrestd (each submit looks the job's name up first, GET /jobs,
  so a resubmit after a crash adopts instead of duplicating);
- ``admission_to_running_p50_s`` / ``_p99_s``: per workload, from its admission to the
  start of its job on Slurm (Slurm's own start time, whole seconds);
- ``admission_to_seen_running_p50_s`` / ``_p99_s``: to the "running" event the tracker
  wrote when it saw it (includes the tracker's polling);
- ``tracker_cpu_ms_per_job``: this process's CPU time (user + system) from the end of the
  submissions to the last workload's end, per job; ``tracker_cpu_ms_per_job_pass``: the
  same per job and per pass (each pass asks slurmrestd about every tracked job);
- ``ended``: workloads by final state; ``jobs_on_slurm``: jobs per name, at most 1 (none
  submitted twice); ``loadavg``: the machine's 1/5/15-minute load when it ended.

    sudo .venv/bin/python -m bench.dispatch --workloads 100
    sudo .venv/bin/python -m bench.dispatch --workloads 500
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sqlmodel import select

from gateway.admission.dispatcher import Dispatcher
from gateway.admission.loop import AdmissionLoop
from gateway.backends.slurm import SlurmBackend, SlurmJobSettings
from tenants import Database, parse_config
from tenants.models import WorkloadEventRow, WorkloadRow
from tenants.services import apply_config
from tenants.services.workloads import PodSetRequest, WorkloadSubmission, submit_workload
from tests.support.slurm import SlurmCluster, install_packages, slurm_cluster

FINAL = ("succeeded", "failed", "cancelled")


def config(workloads: int, cluster: SlurmCluster) -> dict[str, Any]:
    return {
        "backends": [
            {
                "name": "hpc",
                "kind": "slurm",
                "url": cluster.url,
                "token_env": "IGNARA_SLURM_TOKEN",
                "user": cluster.user,
                "partition": cluster.partition,
            }
        ],
        "flavors": [{"name": "h100", "backend": "hpc"}],
        "cluster_queues": [
            {
                "name": "bench",
                "resource_groups": [
                    {
                        "resources": ["nvidia.com/gpu"],
                        "flavors": [
                            {"name": "h100", "quotas": {"nvidia.com/gpu": {"nominal": workloads}}}
                        ],
                    }
                ],
            }
        ],
        "tenants": [{"name": "bench", "queues": ["bench"]}],
    }


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))], 3) if ordered else 0.0


async def run(
    cluster: SlurmCluster, n: int, interval: float, job_seconds: int, directory: Path
) -> dict[str, Any]:
    database = Database(f"sqlite:///{directory / 'bench.db'}")
    await database.migrate()
    async with database.session() as session:
        await apply_config(session, parse_config(config(n, cluster)), actor="bench")
    for i in range(n):
        async with database.session() as session:
            await submit_workload(
                session,
                "bench",
                WorkloadSubmission(
                    name=f"w{i}",
                    queue="bench",
                    pod_sets=(PodSetRequest("main", 1, {"nvidia.com/gpu": "1"}),),
                    max_runtime_seconds=600,
                    command=("sleep", str(job_seconds)) if job_seconds else ("true",),
                ),
                actor="bench",
            )
    admitted = await AdmissionLoop(database).run_pass()
    assert len(admitted.admitted) == n, f"admitted {len(admitted.admitted)} of {n}"
    backend = SlurmBackend(
        "hpc",
        cluster.url,
        token=cluster.token,
        user=cluster.user,
        job_settings=SlurmJobSettings(
            partition=cluster.partition, output_dir=str(directory / "out"), launcher="none"
        ),
    )
    dispatcher = Dispatcher(database, {"hpc": backend}, {"h100": "hpc"})
    began = time.perf_counter()
    submitted_at = None
    cpu_at_submitted = 0.0
    passes = 0
    try:
        while True:
            await dispatcher.run_pass()
            passes += 1
            async with database.session() as session:
                rows = (await session.exec(select(WorkloadRow))).all()
            states = Counter(r.state for r in rows)
            if submitted_at is None and states["admitted"] == 0:
                submitted_at = time.perf_counter()
                cpu_at_submitted = time.process_time()
                tracking_passes_from = passes
            if sum(states[s] for s in FINAL) == n:
                break
            await asyncio.sleep(interval)
        ended_at = time.perf_counter()
        tracker_cpu = time.process_time() - cpu_at_submitted
        tracking_passes = passes - tracking_passes_from
        async with database.session() as session:
            rows = (await session.exec(select(WorkloadRow))).all()
            events = (
                await session.exec(
                    select(WorkloadEventRow).where(
                        WorkloadEventRow.type.in_(("admitted", "running"))
                    )
                )  # type: ignore[attr-defined]
            ).all()
        admitted_at = {e.workload_id: e.at for e in events if e.type == "admitted"}
        seen = {e.workload_id: e.at for e in events if e.type == "running"}
        to_start = [
            (r.started_at - admitted_at[r.id]).total_seconds()
            for r in rows
            if r.started_at is not None
        ]
        to_seen = [(seen[w] - admitted_at[w]).total_seconds() for w in seen]
        names = Counter(
            j["name"]
            for j in cluster.rest("GET", "/jobs")["jobs"]  # type: ignore[union-attr]
        )
    finally:
        await backend.close()
        await database.dispose()
    assert submitted_at is not None
    submit_s = submitted_at - began
    return {
        "workloads": n,
        "interval_s": interval,
        "job_seconds": job_seconds,
        "submit_s": round(submit_s, 3),
        "submissions_per_s": round(n / submit_s, 1),
        "admission_to_running_p50_s": quantile(to_start, 0.5),
        "admission_to_running_p99_s": quantile(to_start, 0.99),
        "admission_to_seen_running_p50_s": quantile(to_seen, 0.5),
        "admission_to_seen_running_p99_s": quantile(to_seen, 0.99),
        "seen_running": len(to_seen),
        "track_s": round(ended_at - submitted_at, 3),
        "tracking_passes": tracking_passes,
        "tracker_cpu_ms_per_job": round(tracker_cpu * 1000 / n, 2),
        "tracker_cpu_ms_per_job_pass": round(tracker_cpu * 1000 / n / max(1, tracking_passes), 3),
        "ended": dict(Counter(r.state for r in rows)),
        "jobs_on_slurm_max_per_name": max(names.values()) if names else 0,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between passes")
    parser.add_argument("--cpus", type=int, default=64, help="cores the fake node claims")
    parser.add_argument(
        "--job-seconds", type=int, default=0, help="jobs sleep this long (0: they run true)"
    )
    args = parser.parse_args()
    install_packages()
    directory = Path(tempfile.mkdtemp(prefix="ignara-bench-dispatch-"))
    directory.chmod(0o755)  # munged (as munge) and slurmrestd (as slurm) go through it
    try:
        with slurm_cluster(directory / "slurm", gpus=args.workloads, cpus=args.cpus) as cluster:
            result = asyncio.run(
                run(cluster, args.workloads, args.interval, args.job_seconds, directory)
            )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
