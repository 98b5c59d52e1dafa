"""Dispatch benchmark: N admitted gangs dispatched to a real Slurm or Ray and tracked to the end.

Starts a throwaway backend: a single-node Slurm with slurmrestd (``--backend slurm``,
tests/support/slurm.py: Debian packages, root) or a Ray head with its Jobs REST API
(``--backend ray``, tests/support/ray.py: Ray's own virtual environment). Either claims one
fake GPU per workload and ``--cpus`` cores, so N tiny jobs are not held back by this
machine's two cores. Then a SQLite database; submits N workloads of one pod x one GPU
running ``true`` (or ``sleep --job-seconds``, so the tracker follows running jobs), admits
them all in one admission pass (the queue's quota holds them all), then runs the gateway's
own dispatcher (gateway.admission.dispatcher, in this process, against the real
SlurmBackend or RayBackend) every --interval seconds until every workload has ended, as
``ignara serve`` does.

Prints one JSON line:

- ``backend``: slurm or ray;
- ``submit_s``, ``submissions_per_s``: from the first dispatcher pass to the moment every
  job was submitted (Slurm: each pass lists the jobs once, GET /jobs, so a resubmit after a
  crash adopts instead of duplicating; Ray: each submit asks for its submission id first);
- ``admission_to_running_p50_s`` / ``_p99_s``: per workload, from its admission to the
  start of its job (Slurm's own start time, whole seconds; Ray has none, so the gateway's
  first sighting of the job RUNNING, which includes its polling);
- ``admission_to_seen_running_p50_s`` / ``_p99_s``: to the "running" event the tracker
  wrote when it saw it (includes the tracker's polling);
- ``tracker_cpu_ms_per_job``: this process's CPU time (user + system) from the end of the
  submissions to the last workload's end, per job; ``tracker_cpu_ms_per_job_pass``: the
  same per job and per pass (each pass asks the backend about every tracked job);
- ``ended``: workloads by final state; ``jobs_max_per_name``: the most jobs of one name on
  the backend (1: none submitted twice); ``loadavg``: the machine's 1/5/15-minute load
  when it ended.

    sudo .venv/bin/python -m bench.dispatch --workloads 100
    sudo .venv/bin/python -m bench.dispatch --workloads 500
    .venv/bin/python -m bench.dispatch --backend ray --workloads 100
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlmodel import col, select

from gateway.admission.dispatcher import Dispatcher
from gateway.admission.loop import AdmissionLoop
from gateway.backends import Backend
from gateway.backends.ray import RayBackend
from gateway.backends.slurm import SlurmBackend, SlurmJobSettings
from tenants import Database, parse_config
from tenants.models import WorkloadEventRow, WorkloadRow
from tenants.services import apply_config
from tenants.services.workloads import PodSetRequest, WorkloadSubmission, submit_workload
from tests.support.ray import install_ray, ray_head
from tests.support.slurm import install_packages, slurm_cluster

FINAL = ("succeeded", "failed", "cancelled")


@dataclass
class Target:
    """A running backend: how the config declares it, the adapter the dispatcher uses, and
    how many jobs of each name it holds (read from the backend itself)."""

    declared: dict[str, Any]
    backend: Callable[[Path], Backend]
    jobs_per_name: Callable[[], Counter[str]]


@contextlib.contextmanager
def slurm_target(directory: Path, gpus: int, cpus: int) -> Iterator[Target]:
    install_packages()
    with slurm_cluster(directory / "slurm", gpus=gpus, cpus=cpus) as cluster:
        declared = {
            "name": "hpc",
            "kind": "slurm",
            "url": cluster.url,
            "token_env": "IGNARA_SLURM_TOKEN",
            "user": cluster.user,
            "partition": cluster.partition,
        }

        def backend(out: Path) -> Backend:
            settings = SlurmJobSettings(
                partition=cluster.partition, output_dir=str(out), launcher="none"
            )
            return SlurmBackend(
                "hpc", cluster.url, token=cluster.token, user=cluster.user, job_settings=settings
            )

        def jobs_per_name() -> Counter[str]:
            jobs = cluster.rest("GET", "/jobs")["jobs"]
            assert isinstance(jobs, list)
            return Counter(str(j["name"]) for j in jobs)

        yield Target(declared, backend, jobs_per_name)


@contextlib.contextmanager
def ray_target(directory: Path, gpus: int, cpus: int) -> Iterator[Target]:
    install_ray()
    # Short: Ray's unix socket paths under it must fit in 107 bytes.
    with ray_head(directory / "r", gpus=gpus, cpus=cpus) as head:
        declared = {"name": "hpc", "kind": "ray", "url": head.url}

        def backend(_out: Path) -> Backend:
            return RayBackend("hpc", head.url)

        def jobs_per_name() -> Counter[str]:
            return Counter(str(j["submission_id"]) for j in head.jobs())

        yield Target(declared, backend, jobs_per_name)


TARGETS = {"slurm": slurm_target, "ray": ray_target}


def config(workloads: int, declared: dict[str, Any]) -> dict[str, Any]:
    return {
        "backends": [declared],
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
    target: Target, n: int, interval: float, job_seconds: int, directory: Path
) -> dict[str, Any]:
    database = Database(f"sqlite:///{directory / 'bench.db'}")
    await database.migrate()
    async with database.session() as session:
        await apply_config(session, parse_config(config(n, target.declared)), actor="bench")
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
    backend = target.backend(directory / "out")
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
                        col(WorkloadEventRow.type).in_(("admitted", "running"))
                    )
                )
            ).all()
        admitted_at = {e.workload_id: e.at for e in events if e.type == "admitted"}
        seen = {e.workload_id: e.at for e in events if e.type == "running"}
        to_start = [
            (r.started_at - admitted_at[r.id]).total_seconds()
            for r in rows
            if r.started_at is not None
        ]
        to_seen = [(seen[w] - admitted_at[w]).total_seconds() for w in seen]
        names = target.jobs_per_name()
    finally:
        await backend.close()
        await database.dispose()
    assert submitted_at is not None
    submit_s = submitted_at - began
    return {
        "backend": target.declared["kind"],
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
        "jobs_max_per_name": max(names.values()) if names else 0,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=sorted(TARGETS), default="slurm")
    parser.add_argument("--workloads", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between passes")
    parser.add_argument("--cpus", type=int, default=64, help="cores the backend claims")
    parser.add_argument(
        "--job-seconds", type=int, default=0, help="jobs sleep this long (0: they run true)"
    )
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="ignara-bench-dispatch-"))
    directory.chmod(0o755)  # munged (as munge) and slurmrestd (as slurm) go through it
    try:
        with TARGETS[args.backend](directory, args.workloads, args.cpus) as target:
            result = asyncio.run(
                run(target, args.workloads, args.interval, args.job_seconds, directory)
            )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
