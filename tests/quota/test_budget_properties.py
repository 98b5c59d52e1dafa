"""Property tests for GPU-hour budgets over random cohort trees and step sequences.

Configurations: 1-2 flavors, a cohort tree of depth up to 2 (cohorts may hold GPU
and GPU-hour quota), 1-5 cluster queues, most with a GPU-hour budget beside their
GPUs, optional borrowing/lending limits and default max runtime, random
preemption policies, fair sharing on or off. Workloads: 1-2 pod sets of 1-3 pods
(optional ``min_count``), small GPU requests, priorities, max runtimes (or none).
Steps: submit, a few cycles or until quiet, advance the clock, finish, delete.

The expected budget state is computed here from the steps alone: a run's
commitment is R x the part of [start, start + max runtime) inside the current
period and its charge R x the part of [start, end) inside it, with R the GPUs it
holds per flavor; the engine is only asked where it admitted what, when.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quota.budgets import to_hours
from quota.engine import QuotaEngine
from quota.model import (
    BorrowWithinCohortPolicy,
    ClusterQueueSpec,
    CohortSpec,
    FlavorQuotas,
    PodSet,
    PreemptionPolicy,
    QueueingStrategy,
    QuotaConfig,
    ReclaimWithinCohort,
    ResourceGroup,
    ResourceQuota,
    WithinClusterQueue,
    Workload,
)
from quota.periods import BudgetPeriod
from quota.resources import FlavorResource
from tests.quota.test_properties import RefNode, reference_tree

GPU, GPU_HOURS = "nvidia.com/gpu", "nvidia.com/gpu-hours"
START = datetime(2026, 11, 1, tzinfo=UTC)
MILLI = 1000

BASE = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_INDEX = {n: st.integers(0, n - 1) for n in range(1, 64)}
BOOLS = st.booleans()
GPU_AMOUNTS = st.sampled_from([0, 1000, 2000, 4000, 4000, 8000])
# Budget quotas in milli-GPU-hours, as a parsed configuration holds them.
HOUR_AMOUNTS = st.sampled_from([0, 2000, 4000, 8000, 16000, 40000])
HOUR_LIMITS = st.none() | st.sampled_from([0, 2000, 8000])
GPU_LIMITS = st.none() | st.sampled_from([0, 1000, 2000])
REQUESTS = st.sampled_from([0, 500, 1000, 1000, 2000])
RUNTIMES = st.sampled_from([None, 900, 1800, 3600, 3600, 7200, 4 * 3600, 10 * 3600])
DEFAULT_RUNTIMES = st.sampled_from([None, None, 3600, 6 * 3600])
ADVANCES = st.sampled_from([60, 600, 1800, 3600, 3 * 3600, 8 * 3600, 20 * 3600])
PRIORITIES = st.integers(-1, 1)
WITHIN = st.sampled_from(list(WithinClusterQueue))
RECLAIM = st.sampled_from(list(ReclaimWithinCohort))
BORROW = st.sampled_from(list(BorrowWithinCohortPolicy))
STRATEGIES = st.sampled_from(list(QueueingStrategy))


def between(draw: st.DrawFn, low: int, high: int) -> int:
    return low + draw(_INDEX[high - low + 1])


def quota(draw: st.DrawFn, amounts: Any, limits: Any) -> ResourceQuota:
    nominal = draw(amounts)
    lending = None if draw(BOOLS) else nominal // 2
    return ResourceQuota(nominal=nominal, borrowing_limit=draw(limits), lending_limit=lending)


def group(draw: st.DrawFn, flavors: list[str], metered: bool) -> ResourceGroup:
    chosen = [f for f in flavors if draw(BOOLS)] or [flavors[0]]
    if len(chosen) > 1 and draw(BOOLS):
        chosen.reverse()
    resources = (GPU, GPU_HOURS) if metered else (GPU,)
    return ResourceGroup(
        resources=resources,
        flavors=tuple(
            FlavorQuotas(
                name=f,
                quotas={
                    GPU: quota(draw, GPU_AMOUNTS, GPU_LIMITS),
                    **({GPU_HOURS: quota(draw, HOUR_AMOUNTS, HOUR_LIMITS)} if metered else {}),
                },
            )
            for f in chosen
        ),
    )


@st.composite
def configs(draw: st.DrawFn, period: BudgetPeriod) -> QuotaConfig:
    flavors = [f"f{i}" for i in range(between(draw, 1, 2))]
    cohorts: list[CohortSpec] = []
    roots: list[str] = []
    for i in range(between(draw, 0, 3)):
        name = f"c{i}"
        parent = roots[draw(_INDEX[len(roots)])] if roots and draw(BOOLS) else None
        if parent is None:
            roots.append(name)
        groups = (group(draw, flavors, True),) if draw(BOOLS) else ()
        cohorts.append(CohortSpec(name=name, parent=parent, resource_groups=groups))
    names = [c.name for c in cohorts]
    queues = []
    for i in range(between(draw, 1, 5)):
        cohort = names[draw(_INDEX[len(names)])] if names and draw(BOOLS) else None
        default = draw(DEFAULT_RUNTIMES)
        queues.append(
            ClusterQueueSpec(
                name=f"q{i}",
                cohort=cohort,
                resource_groups=(group(draw, flavors, between(draw, 0, 4) > 0),),
                queueing_strategy=draw(STRATEGIES),
                preemption=PreemptionPolicy(draw(WITHIN), draw(RECLAIM), draw(BORROW)),
                default_max_runtime=None if default is None else Fraction(default),
            )
        )
    return QuotaConfig(
        flavors=tuple(flavors),
        cohorts=tuple(cohorts),
        cluster_queues=tuple(queues),
        fair_sharing=draw(BOOLS),
        budget_period=period,
    )


Op = tuple[Any, ...]


@st.composite
def cases(draw: st.DrawFn, period: BudgetPeriod) -> tuple[QuotaConfig, list[Op]]:
    config = draw(configs(period))
    queue_names = [q.name for q in config.cluster_queues]
    ops: list[Op] = []
    n = between(draw, 1, 18)
    for i in range(n):
        pod_sets = []
        for p in range(between(draw, 1, 2)):
            count = between(draw, 1, 3)
            min_count = between(draw, 1, count) if draw(BOOLS) else None
            pod_sets.append(PodSet(f"p{p}", count, {GPU: draw(REQUESTS)}, min_count))
        runtime = draw(RUNTIMES)
        ops.append(
            (
                "add",
                Workload(
                    name=f"w{i}",
                    cluster_queue=queue_names[draw(_INDEX[len(queue_names)])],
                    pod_sets=tuple(pod_sets),
                    priority=draw(PRIORITIES),
                    created=float(i),
                    max_runtime=None if runtime is None else Fraction(runtime),
                ),
            )
        )
        for _ in range(between(draw, 0, 3)):
            kind = between(draw, 0, 4)
            if kind == 0:
                ops.append(("cycles", between(draw, 1, 2)))
            elif kind == 1:
                ops.append(("settle",))
            elif kind == 2:
                ops.append(("advance", draw(ADVANCES)))
            else:
                ops.append(("finish" if kind == 3 else "delete", between(draw, 0, n - 1)))
    ops.append(("settle",))
    return config, ops


# -- the expected budget state, from the steps -------------------------------------------


def period_bounds(period: BudgetPeriod, moment: datetime) -> tuple[datetime, datetime]:
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if period is BudgetPeriod.DAY:
        return day, day + timedelta(days=1)
    if period is BudgetPeriod.WEEK:
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=7)
    start = day.replace(day=1)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else None
    return start, end or start.replace(month=start.month + 1)


def hours_inside(start: datetime, end: datetime, bounds: tuple[datetime, datetime]) -> Fraction:
    lo, hi = max(start, bounds[0]), min(end, bounds[1])
    return Fraction(max(0, int((hi - lo).total_seconds())), 3600)


@dataclass
class Run:
    queue: str
    gpus: dict[str, Fraction]  # flavor -> GPUs held (R)
    start: datetime
    runtime: Fraction | None  # seconds; None when its queue meters nothing


@dataclass
class Model:
    """Budgets as the spec computes them, fed only with what happened."""

    config: QuotaConfig
    now: datetime = START
    runs: dict[str, Run] = field(default_factory=dict)
    charged: dict[tuple[str, str], Fraction] = field(default_factory=lambda: defaultdict(Fraction))

    def metered(self, queue: str) -> bool:
        spec = next(q for q in self.config.cluster_queues if q.name == queue)
        return any(GPU_HOURS in g.resources for g in spec.resource_groups)

    def runtime(self, workload: Workload) -> Fraction | None:
        spec = next(q for q in self.config.cluster_queues if q.name == workload.cluster_queue)
        return workload.max_runtime or spec.default_max_runtime

    def start(self, workload: Workload, record: Any) -> None:
        requests = {p.name: p.requests.get(GPU, 0) for p in workload.pod_sets}
        gpus: dict[str, Fraction] = defaultdict(Fraction)
        for assigned in record.admission.pod_sets:
            flavor = assigned.flavors.get(GPU)
            if flavor is not None and requests[assigned.name] and assigned.count:
                gpus[flavor] += Fraction(requests[assigned.name] * assigned.count, MILLI)
        metered = self.metered(workload.cluster_queue) and bool(gpus)
        runtime = self.runtime(workload) if metered else None
        assert not metered or runtime is not None, f"{workload.name}: admitted with no runtime"
        self.runs[workload.name] = Run(workload.cluster_queue, dict(gpus), self.now, runtime)

    def end(self, name: str) -> None:
        run = self.runs.pop(name)
        if run.runtime is None:
            return
        bounds = period_bounds(self.config.budget_period, self.now)
        for flavor, gpus in run.gpus.items():
            self.charged[(run.queue, flavor)] += gpus * hours_inside(run.start, self.now, bounds)

    def advance(self, seconds: int) -> None:
        before = period_bounds(self.config.budget_period, self.now)
        self.now += timedelta(seconds=seconds)
        if period_bounds(self.config.budget_period, self.now) != before:
            self.charged.clear()

    def committed(self) -> dict[tuple[str, str], Fraction]:
        bounds = period_bounds(self.config.budget_period, self.now)
        found: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
        for run in self.runs.values():
            if run.runtime is None:
                continue
            end = run.start + timedelta(seconds=int(run.runtime))
            for flavor, gpus in run.gpus.items():
                found[(run.queue, flavor)] += gpus * hours_inside(run.start, end, bounds)
        return found

    def overrun(self) -> bool:
        return any(
            r.runtime is not None and self.now > r.start + timedelta(seconds=int(r.runtime))
            for r in self.runs.values()
        )

    def headroom(self) -> int | None:
        """Seconds until the first running metered workload reaches its max runtime."""
        left = [
            int((r.start + timedelta(seconds=int(r.runtime)) - self.now).total_seconds())
            for r in self.runs.values()
            if r.runtime is not None
        ]
        return min(left, default=None)


def play(
    config: QuotaConfig, ops: list[Op], check: Any, *, overrun: bool
) -> tuple[QuotaEngine, Model]:
    """Play ``ops``, keeping the model in step; ``check(engine, model)`` after each.
    Without ``overrun``, advances stop where a running workload would pass its max
    runtime, and finishes and deletes happen at or before it."""
    tick = iter(range(1, 10**6))
    engine = QuotaEngine(config, clock=lambda: float(next(tick)), now=START)
    model = Model(config)
    workloads: dict[str, Workload] = {}
    names: list[str] = []

    def cycles(results: Any) -> None:
        for result in results:
            for record in result.preempted_records:
                model.end(record.name)
            for record in result.admitted_records:
                model.start(workloads[record.name], record)
            check(engine, model)

    for op in ops:
        kind = op[0]
        if kind == "add":
            workloads[op[1].name] = op[1]
            names.append(op[1].name)
            engine.add(op[1])
        elif kind == "cycles":
            cycles(engine.cycles(op[1]))
        elif kind == "settle":
            cycles(engine.cycles())
        elif kind == "advance":
            seconds = op[1]
            if not overrun:
                room = model.headroom()
                seconds = seconds if room is None else min(seconds, room)
            if seconds > 0:
                engine.advance_to(engine.now + timedelta(seconds=seconds))
                model.advance(seconds)
                check(engine, model)
        elif op[1] < len(names):
            name = names[op[1]]
            if name in engine.admitted:
                (engine.finish if kind == "finish" else engine.delete)(name)
                model.end(name)
            elif kind == "delete" and any(w.name == name for w in engine.pending()):
                engine.delete(name)
            check(engine, model)
    return engine, model


# -- checks --------------------------------------------------------------------------------


def engine_budgets(engine: QuotaEngine) -> dict[str, dict[str, tuple[Fraction, Fraction]]]:
    """level -> flavor -> (charged, committed) in GPU-hours, as the engine reports."""
    return {
        level: {
            fr.flavor: (to_hours(charged), to_hours(committed))
            for fr, (charged, committed) in amounts.items()
            if fr.resource == GPU_HOURS
        }
        for level, amounts in engine.budgets().items()
    }


def check_matches_model(engine: QuotaEngine, model: Model) -> None:
    got = engine_budgets(engine)
    committed = model.committed()
    for spec in model.config.cluster_queues:
        for flavor in model.config.flavors:
            want = (
                model.charged.get((spec.name, flavor), 0),
                committed.get((spec.name, flavor), 0),
            )
            have = got.get(spec.name, {}).get(flavor, (Fraction(0), Fraction(0)))
            assert have == want, (
                f"{spec.name}/{flavor} at {model.now}: (charged, committed) {have} != {want}"
            )


def subtree_use(
    model: Model, queues: dict[str, RefNode], cohorts: dict[str, RefNode]
) -> dict[int, dict[FlavorResource, Fraction]]:
    """Per node, what it takes of GPU-hours in the tree's terms (milli-hours): a queue
    its charged + committed, a cohort what its children take beyond their
    non-lendable part."""
    committed = model.committed()
    usage: dict[int, dict[FlavorResource, Fraction]] = {}

    def fill(node: RefNode) -> dict[FlavorResource, Fraction]:
        mine: dict[FlavorResource, Fraction] = defaultdict(Fraction)
        if node.is_queue:
            for flavor in model.config.flavors:
                key = (node.name, flavor)
                amount = (model.charged.get(key, 0) + committed.get(key, 0)) * MILLI
                if amount:
                    mine[FlavorResource(flavor, GPU_HOURS)] = amount
        for child in node.children:
            for fr, amount in fill(child).items():
                above = amount - child.guaranteed.get(fr, 0)
                if above > 0:
                    mine[fr] += above
        usage[id(node)] = mine
        return mine

    for node in (*queues.values(), *cohorts.values()):
        if node.parent is None:
            fill(node)
    return usage


def check_within_budget(engine: QuotaEngine, model: Model) -> None:
    check_matches_model(engine, model)
    queues, cohorts = reference_tree(model.config)
    usage = subtree_use(model, queues, cohorts)
    for node in (*queues.values(), *cohorts.values()):
        for fr, amount in usage[id(node)].items():
            where = f"{node.name} {fr} at {model.now}"
            limit = node.quotas[fr].borrowing_limit if fr in node.quotas else None
            if node.parent is None:
                bound = node.subtree.get(fr, 0)
                assert amount <= bound, f"{where}: {amount} > subtree quota {bound}"
            elif limit is not None:
                bound = node.subtree.get(fr, 0) + limit
                assert amount <= bound, f"{where}: {amount} > nominal + borrowing_limit {bound}"


# -- properties ----------------------------------------------------------------------------


@settings(BASE, max_examples=200)
@given(cases(BudgetPeriod.MONTH))
def test_charged_plus_committed_stays_within_what_each_level_may_use(
    case: tuple[QuotaConfig, list[Op]],
) -> None:
    """With no run past its max runtime, no period change and nothing admitted at the
    start, every queue's charged + committed is what the steps say, and at every
    level and flavor it stays within what the level may use: a root within its
    subtree quota (lending limits keep the rest), a node with a borrowing limit
    within nominal + that limit."""
    config, ops = case
    _, model = play(config, ops, check_within_budget, overrun=False)
    assert not model.overrun()


@settings(BASE, max_examples=150)
@given(cases(BudgetPeriod.DAY))
def test_ending_everything_leaves_nothing_committed(case: tuple[QuotaConfig, list[Op]]) -> None:
    """Finishing every admitted workload and deleting every pending one (with runs
    past their max runtime and day boundaries on the way) leaves nothing committed
    at any level, and each queue's budget usage in the tree is just what it was
    charged."""
    config, ops = case
    engine, model = play(config, ops, lambda *_: None, overrun=True)
    for name in list(engine.admitted):
        engine.finish(name)
        model.end(name)
    for name in [w.name for w in engine.pending()]:
        engine.delete(name)
    for level, flavors in engine_budgets(engine).items():
        for flavor, (_, committed) in flavors.items():
            assert committed == 0, f"{level}/{flavor}: {committed} still committed"
    for queue in engine.state.queues.values():
        for fr, amount in queue.usage.items():
            if fr.resource == GPU_HOURS:
                charged = engine.state.charged.get(queue.name, {}).get(fr, 0)
                assert amount == charged, f"{queue.name} {fr}: usage {amount} != charged {charged}"
    check_matches_model(engine, model)


@settings(BASE, max_examples=150)
@given(cases(BudgetPeriod.DAY))
def test_charged_is_the_real_use_of_ended_runs_in_the_period(
    case: tuple[QuotaConfig, list[Op]],
) -> None:
    """After every step, with day boundaries crossed and runs past their max
    runtime: each queue's charged equals the sum over runs that ended this period
    of GPUs x real runtime inside the period, and its committed the sum over
    running workloads of GPUs x the part of their max runtime inside the period."""
    config, ops = case
    play(config, ops, check_matches_model, overrun=True)
