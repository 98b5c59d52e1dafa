"""Property tests for the quota engine over random quota trees and workload streams.

Configurations: 1-3 flavors, 1-2 resources, a cohort tree of depth up to 2
(cohorts may hold their own quota), 1-6 cluster queues with nominal quotas and
optional borrowing/lending limits, random preemption policies, flavor
fungibility, queueing strategies and fair-sharing weights, fair sharing on or
off. Workloads: up to 25, 1-3 pod sets, counts 1-4, optional ``min_count``,
small requests, priorities -2..2, distinct names and ``created`` times.

The engine is driven through its public face only (``add``, ``finish``,
``delete``, ``schedule_once``, ``schedule``, ``admitted``, ``pending``,
``state.queues`` / ``state.cohorts`` nodes and ``quota.tree``'s
``available`` / ``potential_available``). The clock is a counter, so runs are
reproducible and ``admitted_at`` is deterministic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quota.engine import QuotaEngine
from quota.model import (
    BorrowWithinCohortPolicy,
    ClusterQueueSpec,
    CohortSpec,
    FlavorFungibility,
    FlavorQuotas,
    PodSet,
    PreemptionPolicy,
    QueueingStrategy,
    QuotaConfig,
    ReclaimWithinCohort,
    ResourceGroup,
    ResourceQuota,
    WhenCanBorrow,
    WhenCanPreempt,
    WithinClusterQueue,
    Workload,
)
from quota.resources import FlavorResource
from quota.tree import available, potential_available

# A resource no queue or cohort ever covers: a non-zero request for it makes a
# workload inadmissible, a zero request is ignored.
UNCOVERED = "uncovered"

# Cap on cycles when we drive schedule_once ourselves (far above what any example needs).

BASE = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- strategies ----------------------------------------------------------------------------
#
# Module-level strategies and index draws: building strategies inside composites is
# what makes data generation slow, so composites only pick from prepared ones.

_INDEX = {n: st.integers(0, n - 1) for n in range(1, 64)}
BOOLS = st.booleans()
AMOUNTS = st.sampled_from([0, 500, 1000, 2000, 2000, 3000, 4000, 6000])
LIMITS = st.none() | st.sampled_from([0, 500, 1000, 2000])
WEIGHTS = st.sampled_from([Fraction(1), Fraction(1), Fraction(2), Fraction(1, 2), Fraction(0)])
REQUESTS = st.sampled_from([0, 250, 500, 500, 1000, 1000, 1500])
UNCOVERED_REQUESTS = st.sampled_from([0, 0, 500])
PRIORITIES = st.integers(-2, 2)
THRESHOLDS = st.none() | PRIORITIES
WITHIN = st.sampled_from(list(WithinClusterQueue))
RECLAIM = st.sampled_from(list(ReclaimWithinCohort))
BORROW = st.sampled_from(list(BorrowWithinCohortPolicy))
STRATEGIES = st.sampled_from(list(QueueingStrategy))
WHEN_BORROW = st.sampled_from(list(WhenCanBorrow))
WHEN_PREEMPT = st.sampled_from(list(WhenCanPreempt))


def between(draw: st.DrawFn, low: int, high: int) -> int:
    return low + draw(_INDEX[high - low + 1])


def pick(draw: st.DrawFn, items: list[Any]) -> Any:
    return items[draw(_INDEX[len(items)])]


def maybe_pick(draw: st.DrawFn, items: list[Any]) -> Any:
    """None, or one of ``items``."""
    if not items or not draw(BOOLS):
        return None
    return pick(draw, items)


def resource_quota(draw: st.DrawFn) -> ResourceQuota:
    nominal = draw(AMOUNTS)
    lending = None if draw(BOOLS) else 500 * between(draw, 0, nominal // 500)
    return ResourceQuota(nominal=nominal, borrowing_limit=draw(LIMITS), lending_limit=lending)


def resource_groups(
    draw: st.DrawFn, flavors: list[str], resources: list[str], may_be_empty: bool
) -> tuple[ResourceGroup, ...]:
    if may_be_empty and draw(BOOLS):
        return ()
    covered = list(resources)
    if len(covered) > 1 and between(draw, 0, 4) == 0:
        covered = [pick(draw, covered)]  # leave a resource uncovered
    split = len(covered) > 1 and draw(BOOLS)  # one group per resource, or one for all
    partition = [[r] for r in covered] if split else [covered]
    groups = []
    for group_resources in partition:
        remaining = list(flavors)
        chosen = []
        for _ in range(between(draw, 1, len(flavors))):  # an ordered subset of the flavors
            chosen.append(remaining.pop(draw(_INDEX[len(remaining)])))
        groups.append(
            ResourceGroup(
                resources=tuple(group_resources),
                flavors=tuple(
                    FlavorQuotas(
                        name=flavor,
                        quotas={r: resource_quota(draw) for r in group_resources},
                    )
                    for flavor in chosen
                ),
            )
        )
    return tuple(groups)


def preemption_policy(draw: st.DrawFn) -> PreemptionPolicy:
    return PreemptionPolicy(
        within_cluster_queue=draw(WITHIN),
        reclaim_within_cohort=draw(RECLAIM),
        borrow_within_cohort=draw(BORROW),
        max_priority_threshold=draw(THRESHOLDS),
    )


@st.composite
def quota_configs(draw: st.DrawFn) -> QuotaConfig:
    flavors = [f"f{i}" for i in range(between(draw, 1, 3))]
    resources = [f"r{i}" for i in range(between(draw, 1, 2))]
    cohorts: list[CohortSpec] = []
    roots: list[str] = []
    for i in range(between(draw, 0, 3)):
        name = f"c{i}"
        parent = maybe_pick(draw, roots)  # depth at most 2: parents are roots
        if parent is None:
            roots.append(name)
        cohorts.append(
            CohortSpec(
                name=name,
                parent=parent,
                resource_groups=resource_groups(draw, flavors, resources, may_be_empty=True),
                fair_weight=draw(WEIGHTS),
            )
        )
    cohort_names = [c.name for c in cohorts]
    queues = []
    for i in range(between(draw, 1, 6)):
        cohort = maybe_pick(draw, cohort_names)
        groups = resource_groups(draw, flavors, resources, may_be_empty=between(draw, 0, 5) == 0)
        queues.append(
            ClusterQueueSpec(
                name=f"q{i}",
                cohort=cohort,
                resource_groups=groups,
                queueing_strategy=draw(STRATEGIES),
                preemption=preemption_policy(draw),
                flavor_fungibility=FlavorFungibility(
                    when_can_borrow=draw(WHEN_BORROW), when_can_preempt=draw(WHEN_PREEMPT)
                ),
                fair_weight=draw(WEIGHTS),
                stopped=between(draw, 0, 9) == 0,
            )
        )
    return QuotaConfig(
        flavors=tuple(flavors),
        cohorts=tuple(cohorts),
        cluster_queues=tuple(queues),
        fair_sharing=draw(BOOLS),
    )


def _resources_of(config: QuotaConfig) -> list[str]:
    found: set[str] = set()
    specs: list[CohortSpec | ClusterQueueSpec] = [*config.cohorts, *config.cluster_queues]
    for spec in specs:
        for group in spec.resource_groups:
            found.update(group.resources)
    return sorted(found) or ["r0"]


def workload_list(draw: st.DrawFn, config: QuotaConfig, max_size: int = 25) -> list[Workload]:
    resources = _resources_of(config)
    with_uncovered = between(draw, 0, 5) == 0
    queue_names = [q.name for q in config.cluster_queues]
    workloads = []
    for i in range(between(draw, 0, max_size)):
        pod_sets = []
        for p in range(between(draw, 1, 3)):
            count = between(draw, 1, 4)
            min_count = between(draw, 1, count) if draw(BOOLS) else None
            requests = {r: draw(REQUESTS) for r in resources}
            if with_uncovered and draw(BOOLS):
                requests[UNCOVERED] = draw(UNCOVERED_REQUESTS)
            pod_sets.append(
                PodSet(name=f"p{p}", count=count, requests=requests, min_count=min_count)
            )
        workloads.append(
            Workload(
                name=f"w{i}",
                cluster_queue=pick(draw, queue_names),
                pod_sets=tuple(pod_sets),
                priority=draw(PRIORITIES),
                # distinct, so (priority, created) keys are distinct too
                created=float(100 * between(draw, 0, 30) + i),
            )
        )
    return workloads


# A script: ("add", workload) | ("cycles", k) | ("finish", i) | ("delete", i) | ("settle",)
Op = tuple[Any, ...]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[QuotaConfig, list[Workload], list[Op]]:
    config = draw(quota_configs())
    workloads = workload_list(draw, config)
    n = len(workloads)
    ops: list[Op] = []
    for workload in workloads:
        ops.append(("add", workload))
        for _ in range(between(draw, 0, 2)):
            kind = between(draw, 0, 3)
            if kind == 0:
                ops.append(("cycles", between(draw, 1, 3)))
            elif kind == 1:
                ops.append(("settle",))
            else:
                ops.append(("finish" if kind == 2 else "delete", between(draw, 0, n - 1)))
    ops.append(("settle",))
    return config, workloads, ops


# -- driving the engine --------------------------------------------------------------------


class TickClock:
    """A deterministic clock: every call is one second later."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def new_engine(config: QuotaConfig) -> QuotaEngine:
    return QuotaEngine(config, clock=TickClock())


def run_script(
    config: QuotaConfig, ops: Iterable[Op], check: Any = None
) -> tuple[QuotaEngine, set[str]]:
    """Play ``ops``; ``check(engine, result_or_None, before, alive)`` runs after every
    cycle and every finish/delete, ``before`` being (pending names, admitted names)
    just beforehand and ``alive`` the workloads added and not yet finished or deleted.
    Returns the engine and the names of the workloads still alive."""
    engine = new_engine(config)
    alive: set[str] = set()
    names: list[str] = []

    def snapshot() -> tuple[list[str], set[str]]:
        return [w.name for w in engine.pending()], set(engine.admitted)

    def play(results: Iterator[Any]) -> None:
        before = snapshot()
        for result in results:
            if check is not None:
                check(engine, result, before, alive)
            before = snapshot()

    for op in ops:
        kind = op[0]
        if kind == "add":
            engine.add(op[1])
            alive.add(op[1].name)
            names.append(op[1].name)
        elif kind == "cycles":
            play(engine.cycles(op[1]))
        elif kind == "settle":
            play(engine.cycles())
        elif kind in ("finish", "delete"):
            if op[1] >= len(names):
                continue
            name = names[op[1]]
            before = snapshot()
            if kind == "finish":
                if name not in engine.admitted:
                    continue
                engine.finish(name)
            else:
                if name not in alive:
                    continue
                engine.delete(name)
            alive.discard(name)
            if check is not None:
                check(engine, None, before, alive)
    return engine, alive


# -- reference arithmetic, computed from the configuration alone ---------------------------


@dataclass
class RefNode:
    """What the configuration says about one node, computed independently of the engine."""

    name: str
    is_queue: bool
    parent: str | None
    quotas: dict[FlavorResource, ResourceQuota]
    children: list[RefNode]
    subtree: dict[FlavorResource, int]
    guaranteed: dict[FlavorResource, int]


def _own_quotas(groups: tuple[ResourceGroup, ...]) -> dict[FlavorResource, ResourceQuota]:
    quotas = {}
    for group in groups:
        for flavor in group.flavors:
            for resource, quota in flavor.quotas.items():
                quotas[FlavorResource(flavor.name, resource)] = quota
    return quotas


def reference_tree(config: QuotaConfig) -> tuple[dict[str, RefNode], dict[str, RefNode]]:
    """(queues, cohorts) with subtree quotas and guaranteed (non-lendable) parts."""
    cohorts = {
        c.name: RefNode(c.name, False, c.parent, _own_quotas(c.resource_groups), [], {}, {})
        for c in config.cohorts
    }
    queues = {
        q.name: RefNode(q.name, True, q.cohort, _own_quotas(q.resource_groups), [], {}, {})
        for q in config.cluster_queues
    }
    for node in (*cohorts.values(), *queues.values()):
        if node.parent is not None:
            if node.parent not in cohorts:  # an implicit cohort, with no quota
                cohorts[node.parent] = RefNode(node.parent, False, None, {}, [], {}, {})
            cohorts[node.parent].children.append(node)

    def fill(node: RefNode) -> None:
        subtree = {fr: q.nominal for fr, q in node.quotas.items()}
        for child in node.children:
            fill(child)
            for fr, amount in child.subtree.items():
                subtree[fr] = subtree.get(fr, 0) + amount - child.guaranteed.get(fr, 0)
        node.subtree = subtree
        node.guaranteed = {
            fr: max(0, amount - node.quotas[fr].lending_limit)  # type: ignore[operator]
            for fr, amount in subtree.items()
            if fr in node.quotas and node.quotas[fr].lending_limit is not None
        }

    for node in (*cohorts.values(), *queues.values()):
        if node.parent is None:
            fill(node)
    return queues, cohorts


def all_flavor_resources(config: QuotaConfig, engine: QuotaEngine) -> set[FlavorResource]:
    frs = {
        FlavorResource(f, r) for f in config.flavors for r in [*_resources_of(config), UNCOVERED]
    }
    for node in (*engine.state.queues.values(), *engine.state.cohorts.values()):
        frs.update(node.usage)
        frs.update(node.subtree_quota)
    return frs


def group_flavors(spec: ClusterQueueSpec) -> dict[str, tuple[int, set[str]]]:
    """resource -> (index of its resource group, flavors of that group)."""
    found = {}
    for index, group in enumerate(spec.resource_groups):
        for resource in group.resources:
            found[resource] = (index, {f.name for f in group.flavors})
    return found


# -- invariants ----------------------------------------------------------------------------


def check_usage_within_quota(config: QuotaConfig, engine: QuotaEngine) -> None:
    state = engine.state
    ref_queues, ref_cohorts = reference_tree(config)
    assert set(state.queues) == set(ref_queues)
    assert set(state.cohorts) == set(ref_cohorts)
    frs = all_flavor_resources(config, engine)

    # Usage per queue, recomputed from scratch from the admitted records.
    queue_usage: dict[str, Counter[FlavorResource]] = {name: Counter() for name in ref_queues}
    for name, record in engine.admitted.items():
        assert record.workload.name == name
        assert record.admission.cluster_queue == record.workload.cluster_queue
        queue_usage[record.admission.cluster_queue].update(record.usage)

    # Cohort usage: what each child takes beyond its guaranteed part, summed.
    expected: dict[int, dict[FlavorResource, int]] = {}

    def expect(node: RefNode) -> dict[FlavorResource, int]:
        if node.is_queue:
            usage = {fr: queue_usage[node.name].get(fr, 0) for fr in frs}
        else:
            usage = dict.fromkeys(frs, 0)
            for child in node.children:
                child_usage = expect(child)
                for fr in frs:
                    usage[fr] += max(0, child_usage[fr] - child.guaranteed.get(fr, 0))
        expected[id(node)] = usage
        return usage

    for ref in (*ref_queues.values(), *ref_cohorts.values()):
        if ref.parent is None:
            expect(ref)

    for ref in (*ref_queues.values(), *ref_cohorts.values()):
        node = state.queues[ref.name] if ref.is_queue else state.cohorts[ref.name]
        kind = "queue" if ref.is_queue else "cohort"
        assert (node.parent.name if node.parent is not None else None) == ref.parent
        for fr in frs:
            usage = node.usage.get(fr, 0)
            where = f"{kind} {ref.name} {fr}"
            # Incremental bookkeeping matches a recount.
            assert usage == expected[id(ref)][fr], (
                f"{where}: usage {usage} != recount {expected[id(ref)][fr]}"
            )
            assert node.subtree_quota.get(fr, 0) == ref.subtree.get(fr, 0), (
                f"{where}: subtree quota"
            )
            assert usage >= 0, where
            # Never more than the tree could ever give this node.
            assert usage <= potential_available(node, fr), f"{where}: {usage} > potential"
            # Nothing is over-committed anywhere on the way to the root.
            assert available(node, fr) >= 0, f"{where}: available {available(node, fr)} < 0"
            quota = ref.quotas.get(fr)
            if ref.parent is None:
                assert usage <= ref.subtree.get(fr, 0), (
                    f"{where}: root usage {usage} > subtree quota"
                )
            elif quota is not None and quota.borrowing_limit is not None:
                bound = ref.subtree.get(fr, 0) + quota.borrowing_limit
                assert usage <= bound, f"{where}: usage {usage} > nominal + borrowing_limit {bound}"


def check_admissions_whole(engine: QuotaEngine) -> None:
    specs = {q.name: q for q in engine.config.cluster_queues}
    for name, record in engine.admitted.items():
        workload = record.workload
        spec = specs[record.admission.cluster_queue]
        groups = group_flavors(spec)
        assigned = {p.name: p for p in record.admission.pod_sets}
        assert len(assigned) == len(record.admission.pod_sets), f"{name}: a pod set twice"
        assert set(assigned) == {p.name for p in workload.pod_sets}, f"{name}: pod sets missing"
        usage: Counter[FlavorResource] = Counter()
        for pod_set in workload.pod_sets:
            got = assigned[pod_set.name]
            where = f"{name}/{pod_set.name}"
            if pod_set.min_count is None:
                assert got.count == pod_set.count, f"{where}: count {got.count} != {pod_set.count}"
            else:
                assert pod_set.min_count <= got.count <= pod_set.count, (
                    f"{where}: count {got.count}"
                )
            wanted = {r for r, v in pod_set.requests.items() if v}
            assert wanted <= set(got.flavors), f"{where}: no flavor for {wanted - set(got.flavors)}"
            flavor_of_group: dict[int, str] = {}
            for resource, flavor in got.flavors.items():
                assert resource in groups, f"{where}: {resource} is in no resource group"
                index, allowed = groups[resource]
                assert flavor in allowed, f"{where}: {flavor} not a flavor of {resource}'s group"
                previous = flavor_of_group.setdefault(index, flavor)
                assert previous == flavor, f"{where}: group {index} split over {previous}, {flavor}"
                amount = pod_set.requests.get(resource, 0) * got.count
                if amount:
                    usage[FlavorResource(flavor, resource)] += amount
        held = {fr: v for fr, v in record.usage.items() if v}
        assert held == dict(usage), f"{name}: usage {held} != requests x counts {dict(usage)}"


def check_partition(
    engine: QuotaEngine,
    result: Any,
    before: tuple[list[str], set[str]],
    alive: set[str],
) -> None:
    pending = [w.name for w in engine.pending()]
    admitted = set(engine.admitted)
    assert len(pending) == len(set(pending)), f"pending twice: {sorted(pending)}"
    assert not (set(pending) & admitted), f"pending and admitted: {set(pending) & admitted}"
    assert set(pending) | admitted == alive, (
        f"lost {alive - set(pending) - admitted}, unknown {(set(pending) | admitted) - alive}"
    )
    if result is None:
        return
    pending_before, admitted_before = set(before[0]), before[1]
    newly, evicted = set(result.admitted), set(result.preempted)
    assert len(newly) == len(result.admitted) and len(evicted) == len(result.preempted)
    assert newly <= pending_before, f"admitted what was not pending: {newly - pending_before}"
    assert evicted <= admitted_before, (
        f"preempted what was not admitted: {evicted - admitted_before}"
    )
    assert admitted == (admitted_before - evicted) | newly
    assert evicted <= set(pending), f"preempted but not pending again: {evicted - set(pending)}"


# -- properties ----------------------------------------------------------------------------


@settings(BASE, max_examples=250)
@given(scenarios())
def test_usage_never_exceeds_what_the_tree_allows(
    case: tuple[QuotaConfig, list[Workload], list[Op]],
) -> None:
    """After every cycle (and every finish/delete), the usage each queue and cohort
    node holds equals a recount from the admitted records (cohorts: what children
    take beyond their guaranteed part), subtree quotas match the configuration,
    and no node holds more than the tree allows: roots within their subtree quota,
    borrowers within nominal + borrowing_limit, every node within its potential
    capacity, and ``available`` is never negative anywhere (nobody borrowed into
    another's non-lendable part)."""
    config, _, ops = case

    def check(engine: QuotaEngine, *_: Any) -> None:
        check_usage_within_quota(config, engine)

    engine, _ = run_script(config, ops, check)
    check_usage_within_quota(config, engine)


@settings(BASE, max_examples=200)
@given(scenarios())
def test_admission_is_all_or_nothing(case: tuple[QuotaConfig, list[Workload], list[Op]]) -> None:
    """Every admitted workload has every pod set admitted, with its full count (or,
    with min_count, between min_count and count), a flavor of the right resource
    group for every resource it requests, one flavor per resource group within a
    pod set, and holds exactly requests x counts in those flavors."""
    config, _, ops = case

    def check(engine: QuotaEngine, *_: Any) -> None:
        check_admissions_whole(engine)

    engine, _ = run_script(config, ops, check)
    check_admissions_whole(engine)


@settings(BASE, max_examples=150)
@given(scenarios())
def test_releasing_everything_returns_usage_to_zero(
    case: tuple[QuotaConfig, list[Workload], list[Op]],
) -> None:
    """Finishing every admitted workload and deleting every pending one leaves no
    usage on any queue or cohort, and nothing pending or admitted."""
    config, _, ops = case
    engine, _ = run_script(config, ops)
    for name in list(engine.admitted):
        engine.finish(name)
    for name in [w.name for w in engine.pending()]:
        engine.delete(name)
    assert not engine.admitted
    assert list(engine.pending()) == []
    for node in (*engine.state.queues.values(), *engine.state.cohorts.values()):
        leftover = {fr: v for fr, v in node.usage.items() if v}
        assert not leftover, f"{node.name} still uses {leftover}"
    result = engine.schedule_once()
    assert not result.changed


@st.composite
def permuted_workloads(draw: st.DrawFn) -> tuple[QuotaConfig, list[Workload], list[Workload]]:
    config = draw(quota_configs())
    workloads = workload_list(draw, config, max_size=15)
    return config, draw(st.permutations(workloads)), draw(st.permutations(workloads))


def admissions(engine: QuotaEngine) -> dict[str, Any]:
    return {
        name: (
            record.admission.cluster_queue,
            sorted(
                (p.name, p.count, tuple(sorted(p.flavors.items())))
                for p in record.admission.pod_sets
            ),
        )
        for name, record in engine.admitted.items()
    }


@settings(BASE, max_examples=120)
@given(permuted_workloads())
def test_admissions_do_not_depend_on_submission_order(
    case: tuple[QuotaConfig, list[Workload], list[Workload]],
) -> None:
    """The same workloads (distinct names and (priority, created) keys) added in two
    different orders and scheduled to quiescence end with the same admitted set,
    the same admissions (queue, count and flavors per pod set) and the same
    pending set."""
    config, first, second = case
    outcomes = []
    for order in (first, second):
        engine = new_engine(config)
        for workload in order:
            engine.add(workload)
        engine.schedule()
        outcomes.append((admissions(engine), sorted(w.name for w in engine.pending())))
    assert outcomes[0] == outcomes[1]


@settings(BASE, max_examples=200)
@given(scenarios())
def test_every_workload_is_pending_or_admitted_exactly_once(
    case: tuple[QuotaConfig, list[Workload], list[Op]],
) -> None:
    """After every cycle, finish and delete, each live workload (added, not finished
    or deleted) is exactly one of pending or admitted, with no duplicates; a cycle
    admits only pending workloads, preempts only admitted ones (which are pending
    again), and changes the admitted set by exactly what it reports."""
    config, _, ops = case
    engine, alive = run_script(config, ops, check_partition)
    check_partition(engine, None, ([], set()), alive)
