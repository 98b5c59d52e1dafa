"""Play a trace through the quota engine on a simulated clock.

Event-driven: the clock jumps to the next arrival or completion; there, jobs
that ended release their quota, jobs submitted then are queued, and admission
cycles run until quiet. An admitted job runs for its recorded duration; a
preempted one goes back to its queue and, once admitted again, restarts from
scratch (as the local backend reruns a preempted gang), so the GPU-time of the
interrupted run is lost and counted.

The engine knows quota, not machines: a job fits when its team's quota (and,
under a cohort, what it may borrow) has room for its GPUs. Node fragmentation
and placement are not modelled.
"""

from __future__ import annotations

import heapq
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from quota.engine import QuotaEngine
from quota.model import PodSet, QuotaConfig, Workload
from quota.replay.policies import GPU, GPUS_PER_NODE, MILLI, nominal_gpus, policy_of
from quota.replay.trace import TraceJob

__all__ = ["JobRecord", "ReclaimSample", "ReplayResult", "UsageSample", "replay", "workload_of"]

Progress = Callable[[int], None]
INFINITY = float("inf")


@dataclass(slots=True)
class JobRecord:
    """What happened to one job. Times are seconds from the replay's origin."""

    name: str
    team: str
    gpus: int
    duration: float
    submit: float
    first_start: float | None = None
    end: float | None = None  # completion of its last, whole run
    runs: int = 0  # admissions; each after the first restarted it
    lost_gpu_seconds: float = 0.0  # GPU-time of runs cut short by preemption
    wait: float = 0.0  # total time pending (before the first run and after evictions)
    run_start: float | None = None
    pending_since: float | None = None
    reason: str | None = None  # why it was still pending when the replay ended

    @property
    def completed(self) -> bool:
        return self.end is not None


@dataclass(frozen=True, slots=True)
class UsageSample:
    """From ``at`` until the next sample: GPUs held, and how many of them were
    borrowed (held by queues past their nominal quota)."""

    at: float
    used: int
    borrowed: int


@dataclass(slots=True)
class ReclaimSample:
    """A team asked for GPUs within its nominal quota (its queue's admitted and
    pending GPUs, this job included, fit in it). ``needed``: the cluster had no
    free room for the job then, so only taking back lent quota could start it."""

    team: str
    job: str
    asked: float
    needed: bool
    granted: float | None = None


@dataclass
class ReplayResult:
    policy: str
    origin: datetime  # time 0 of the replay (the first job's submit time)
    capacity: int  # GPUs: the sum of nominal quotas
    nominal: dict[str, int]
    jobs: list[JobRecord]
    usage: list[UsageSample]
    reclaims: list[ReclaimSample]
    dropped: dict[str, int]  # jobs of teams with no cluster queue, by team
    end: float  # the simulated time the replay stopped at
    last_arrival: float
    cycles: int = 0
    admissions: int = 0
    preemptions: int = 0
    truncated: str | None = None  # why the replay stopped before every job was played
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU time: on a shared machine, less than wall
    peak_rss_mb: float = 0.0
    extra: dict[str, object] = field(default_factory=dict)


def workload_of(job: TraceJob, created: float) -> Workload:
    """A job as a gang: up to a node, one pod of its GPUs; past it, whole 8-GPU
    nodes and one pod for the remainder."""
    if job.gpus <= GPUS_PER_NODE:
        pod_sets: tuple[PodSet, ...] = (PodSet("worker", 1, {GPU: job.gpus * MILLI}),)
    else:
        nodes, rest = divmod(job.gpus, GPUS_PER_NODE)
        pod_sets = (PodSet("node", nodes, {GPU: GPUS_PER_NODE * MILLI}),)
        if rest:
            pod_sets += (PodSet("rest", 1, {GPU: rest * MILLI}),)
    return Workload(name=job.name, cluster_queue=job.team, pod_sets=pod_sets, created=created)


class _AdmissionClock:
    """The engine orders admissions by this clock: the simulated time, nudged so two
    admissions at one instant still have an order."""

    def __init__(self) -> None:
        self.now = 0.0
        self._last = -1.0

    def __call__(self) -> float:
        self._last = max(self.now, self._last + 1e-6)
        return self._last


class _Replay:
    def __init__(self, config: QuotaConfig, jobs: Sequence[TraceJob]) -> None:
        self.nominal = nominal_gpus(config)
        self.capacity = sum(self.nominal.values())
        self.origin = jobs[0].submit
        self.clock = _AdmissionClock()
        self.engine = QuotaEngine(config, clock=self.clock, now=self.origin)
        self.jobs = jobs
        self.records: dict[str, JobRecord] = {}
        self.team_used = dict.fromkeys(self.nominal, 0)
        self.team_borrowed = 0  # GPUs held past their team's nominal quota, all teams
        self.team_pending = dict.fromkeys(self.nominal, 0)
        self.used = 0
        self.completions: list[tuple[float, int, str, int]] = []
        self.seq = 0
        self.usage: list[UsageSample] = []
        self.reclaims: list[ReclaimSample] = []
        self.asking: dict[str, ReclaimSample] = {}
        self.cycles = self.admissions = self.preemptions = 0

    def at(self, job: TraceJob) -> float:
        return (job.submit - self.origin).total_seconds()

    def enqueue(self, record: JobRecord, now: float) -> None:
        """Bookkeeping for a job entering its queue (new or evicted)."""
        team = record.team
        within = self.team_used[team] + self.team_pending[team] + record.gpus <= self.nominal[team]
        if within:
            sample = ReclaimSample(
                team, record.name, now, needed=self.capacity - self.used < record.gpus
            )
            self.reclaims.append(sample)
            self.asking[record.name] = sample
        self.team_pending[team] += record.gpus
        record.pending_since = now

    def admitted(self, record: JobRecord, now: float) -> None:
        assert record.pending_since is not None
        record.wait += now - record.pending_since
        record.pending_since = None
        record.run_start = now
        if record.first_start is None:
            record.first_start = now
        record.runs += 1
        self.team_pending[record.team] -= record.gpus
        self._use(record.team, record.gpus)
        self.used += record.gpus
        sample = self.asking.pop(record.name, None)
        if sample is not None:
            sample.granted = now
        self.seq += 1
        heapq.heappush(
            self.completions, (now + record.duration, self.seq, record.name, record.runs)
        )
        self.admissions += 1

    def stopped(self, record: JobRecord, now: float, *, preempted: bool) -> None:
        assert record.run_start is not None
        if preempted:
            record.lost_gpu_seconds += (now - record.run_start) * record.gpus
            self.preemptions += 1
        else:
            record.end = now
        record.run_start = None
        self._use(record.team, -record.gpus)
        self.used -= record.gpus

    def _use(self, team: str, gpus: int) -> None:
        # What is borrowed kept as it changes: read after every event.
        nominal, before = self.nominal[team], self.team_used[team]
        after = self.team_used[team] = before + gpus
        self.team_borrowed += max(0, after - nominal) - max(0, before - nominal)

    def borrowed(self) -> int:
        return self.team_borrowed

    def run_cycles(self, now: float, out_of_time: Callable[[], bool]) -> bool:
        """Cycles until quiet; False if time ran out first (a backlog can take
        thousands of cycles at one instant, one head of each queue per cycle)."""
        for cycle in self.engine.cycles():
            self.cycles += 1
            for evicted in cycle.preempted_records:
                record = self.records[evicted.name]
                self.stopped(record, now, preempted=True)
                self.enqueue(record, now)
            for admitted in cycle.admitted_records:
                self.admitted(self.records[admitted.name], now)
            if self.cycles % 64 == 0 and out_of_time():
                return False
        return True


def replay(
    config: QuotaConfig,
    jobs: Sequence[TraceJob],
    *,
    progress: Progress | None = None,
    timeout: float | None = None,
    wall_clock: Callable[[], float] = time.perf_counter,
) -> ReplayResult:
    """Play ``jobs`` (sorted by submit time) through a fresh engine on ``config``.
    Jobs of teams with no cluster queue are dropped and counted. ``progress`` is
    called with the number of events (arrivals and completions) just played;
    ``timeout`` (wall seconds) stops the replay early, saying so in the result."""
    started = wall_clock()
    cpu_started = time.process_time()
    queues = {queue.name for queue in config.cluster_queues}
    dropped: dict[str, int] = {}
    kept = []
    for job in jobs:
        if job.team in queues:
            kept.append(job)
        else:
            dropped[job.team] = dropped.get(job.team, 0) + 1
    if not kept:
        return ReplayResult(
            policy_of(config), jobs[0].submit if jobs else datetime.min, 0,
            nominal_gpus(config), [], [], [], dropped, 0.0, 0.0,
        )  # fmt: skip
    state = _Replay(config, kept)
    engine, heap = state.engine, state.completions
    truncated = None
    index, now = 0, 0.0
    last_used = last_borrowed = -1

    def out_of_time() -> bool:
        return timeout is not None and wall_clock() - started > timeout

    while index < len(kept) or heap:
        if out_of_time():
            truncated = f"stopped after {timeout:g} s of wall time (--timeout)"
            break
        next_arrival = state.at(kept[index]) if index < len(kept) else INFINITY
        now = min(next_arrival, heap[0][0] if heap else INFINITY)
        state.clock.now = now
        engine.advance_to(state.origin + timedelta(seconds=now))
        events = 0
        while heap and heap[0][0] <= now:
            _, _, name, run = heapq.heappop(heap)
            record = state.records[name]
            if run != record.runs or record.run_start is None:
                continue  # the end of a run that was preempted
            engine.finish(name)
            state.stopped(record, now, preempted=False)
            events += 1
        while index < len(kept) and state.at(kept[index]) <= now:
            job = kept[index]
            index += 1
            record = JobRecord(job.name, job.team, job.gpus, job.duration, now)
            state.records[job.name] = record
            engine.add(workload_of(job, created=now))
            state.enqueue(record, now)
            events += 1
        if not state.run_cycles(now, out_of_time):
            truncated = f"stopped after {timeout:g} s of wall time (--timeout)"
        borrowed = state.borrowed()
        if state.used != last_used or borrowed != last_borrowed:
            state.usage.append(UsageSample(now, state.used, borrowed))
            last_used, last_borrowed = state.used, borrowed
        if progress is not None and events:
            progress(events)
        if truncated is not None:
            break
    for record in state.records.values():
        if record.pending_since is not None:
            reason = engine.reason(record.name)
            record.reason = reason.code.value if reason is not None else None
    return ReplayResult(
        policy=policy_of(config),
        origin=state.origin,
        capacity=state.capacity,
        nominal=dict(state.nominal),
        jobs=list(state.records.values()),
        usage=state.usage,
        reclaims=state.reclaims,
        dropped=dropped,
        end=now,
        last_arrival=state.at(kept[-1]),
        cycles=state.cycles,
        admissions=state.admissions,
        preemptions=state.preemptions,
        truncated=truncated,
        wall_seconds=wall_clock() - started,
        cpu_seconds=time.process_time() - cpu_started,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
