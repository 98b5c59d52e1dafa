"""The admission cycle (Kueue's ``pkg/scheduler/scheduler.go``).

One cycle:
  1. take the head of every active cluster queue;
  2. nominate each head against the usage at the start of the cycle: assign
     flavors, find preemption targets, or try fewer pods (partial admission);
  3. order the entries (less borrowing, higher priority, older first; or, with
     fair sharing, a tournament of dominant resource shares);
  4. process them in order against usage as it now stands: admit what still
     fits, evict the targets of a preemptor (it is admitted in a later cycle,
     its capacity held for the rest of this one), skip what no longer fits;
  5. requeue every head that was not admitted, release the evicted workloads'
     quota, and give set-aside workloads of the affected trees another chance.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from quota.cache import AdmittedWorkload, ClusterQueueNode, ClusterState, Freed
from quota.entry import Entry, Status
from quota.fair_iterator import fair_sharing_order
from quota.flavor_assigner import (
    Assignment,
    FlavorAssigner,
    Mode,
    ScanProgress,
    Simulator,
    find_borrow_level,
)
from quota.model import Admission, PodSetAssignment, ReclaimWithinCohort, Workload
from quota.partial import can_be_partially_admitted, search
from quota.preemption import PreemptionReason, PreemptionRequest, Preemptor, Target
from quota.queues import QueueManager
from quota.reasons import PendingReason, ReasonCode
from quota.resources import FlavorResource
from quota.tree import add_usage, queue_available, remove_usage

__all__ = ["CycleResult", "Preemption", "Scheduler"]


_PREEMPTION_CAUSES = {
    PreemptionReason.IN_CLUSTER_QUEUE: "prioritization in the cluster queue",
    PreemptionReason.IN_COHORT_RECLAMATION: "reclamation within the cohort",
    PreemptionReason.IN_COHORT_RECLAIM_WHILE_BORROWING: (
        "reclamation within the cohort while borrowing"
    ),
    PreemptionReason.IN_COHORT_FAIR_SHARING: "fair sharing within the cohort",
}


@dataclass(frozen=True, slots=True)
class Preemption:
    """Why an admitted workload was evicted: which workload needed the room, and
    Kueue's reason for taking it from this one."""

    preemptor: str
    reason: PreemptionReason

    @property
    def message(self) -> str:
        # Kueue's wording ("Preempted to accommodate a workload ... due to ...").
        return (
            f"preempted to accommodate workload {self.preemptor} due to "
            f"{_PREEMPTION_CAUSES[self.reason]}"
        )


@dataclass(slots=True)
class CycleResult:
    """What one cycle did. ``reasons``: why each head not admitted waits; the workloads
    set aside with a head share its reason (ask :meth:`QuotaEngine.reason`)."""

    heads: list[str]
    admitted_records: list[AdmittedWorkload]
    preempted_records: list[AdmittedWorkload]
    reasons: dict[str, PendingReason]
    preemptions: dict[str, Preemption]

    def __init__(self) -> None:  # written out: see quota/__init__.py, "Hot classes"
        self.heads = []
        self.admitted_records = []
        self.preempted_records = []
        self.reasons = {}
        self.preemptions = {}

    @property
    def admitted(self) -> list[str]:
        return [r.name for r in self.admitted_records]

    @property
    def preempted(self) -> list[str]:
        return [r.name for r in self.preempted_records]

    @property
    def changed(self) -> bool:
        return bool(self.admitted_records or self.preempted_records)


class Scheduler:
    def __init__(
        self,
        state: ClusterState,
        queues: QueueManager,
        *,
        fair_sharing: bool,
        reference: bool = False,
    ) -> None:
        """``reference`` runs the plain (slow) preemption search, for tests that check
        the fast one decides the same."""
        self.state = state
        self.queues = queues
        self.fair_sharing = fair_sharing
        self.preemptor = Preemptor(state, fair_sharing=fair_sharing, reference=reference)
        # Evictions kept out of usage while a cycle is processed (see _Cycle); not under
        # a fair sharing order, which reads usage as it is, nor for the reference.
        self._shadow = not (fair_sharing or reference)
        self.cycle = 0
        self._scans: dict[str, _ScanState] = {}
        # A queue's spec is fixed for the life of the state (a new config, a new state).
        self._stopped = frozenset(q.name for q in state.queues.values() if q.spec.stopped)

    # -- the cycle ----------------------------------------------------------------------

    def schedule_once(self, now: float) -> CycleResult:
        self.cycle += 1
        result = CycleResult()
        # 1. Heads.
        heads = self.queues.heads(skip=self._stopped)
        if not heads:
            return result  # nothing to nominate: the steps below would do nothing
        result.heads = [w.name for w in heads]
        # 2. Nominate against the usage at the start of the cycle, which stands still
        # until processing: the preemption searches share what they collect.
        with self.preemptor.frozen():
            entries = [self._nominate(w, resume=self._resume(w)) for w in heads]
        self._remember_scans(entries)
        # 3-4. Order and process.
        cycle = _Cycle(self.state, shadow=self._shadow)
        for entry in self._ordered(entries):
            self._process(entry, cycle, now, result)
        cycle.release_reservations()
        # 5. Requeue what was not admitted; evictions complete and free quota.
        self._requeue(entries, result)
        self._evict(cycle, result, now)
        return result

    def _remember_scans(self, entries: list[Entry]) -> None:
        for entry in entries:
            self._scans[entry.workload.name] = _ScanState(
                self.cycle, self.state.generation(entry.queue), entry.assignment.progress
            )

    def _requeue(self, entries: list[Entry], result: CycleResult) -> None:
        for entry in entries:
            if entry.status is Status.ADMITTED or entry.sticky:
                self._scans.pop(entry.workload.name, None)  # the next scan starts afresh
            if entry.status is Status.ADMITTED:
                continue
            self.queues.requeue(
                entry.workload,
                immediate=entry.immediate,
                sticky=entry.sticky,
                # Refused for a budget: others alike but in what they would commit may fit.
                alike=not any(
                    b.resource in entry.queue.budget_resources for b in entry.assignment.blockers
                ),
                reason=entry.reason,
            )
            if entry.reason is not None:
                result.reasons[entry.workload.name] = entry.reason

    def _evict(self, cycle: _Cycle, result: CycleResult, now: float) -> None:
        touched = set()
        for name, (record, preemption) in cycle.preempted.items():
            self.state.release(name)
            record.workload = replace(record.workload, queued=now)
            self.queues.add(record.workload)
            result.preempted_records.append(record)
            result.preemptions[name] = preemption
            touched.add(record.admission.cluster_queue)
        for name in touched:
            self.quota_released(name)

    def forget(self, name: str) -> None:
        """A workload left the system: drop what the scheduler remembers of it."""
        self._scans.pop(name, None)

    def quota_released(self, queue_name: str) -> None:
        """Quota came free in a queue's tree: its set-aside workloads get another try."""
        self.queues.requeue_inadmissible(self.state.tree_queue_names(self.state.queues[queue_name]))

    # -- 2. nomination ------------------------------------------------------------------

    def _resume(self, workload: Workload) -> ScanProgress | None:
        """Where the last flavor scan stopped, unless that is stale: older than the
        previous cycle, with usage changed in the tree since."""
        scan = self._scans.get(workload.name)
        if scan is None:
            return None
        queue = self.state.queues[workload.cluster_queue]
        if scan.cycle < self.cycle - 1 and self.state.generation(queue) > scan.generation:
            del self._scans[workload.name]
            return None
        return scan.progress

    def _nominate(
        self,
        workload: Workload,
        *,
        resume: ScanProgress | None = None,
    ) -> Entry:
        queue = self.state.queues[workload.cluster_queue]
        assigner = FlavorAssigner(
            workload,
            queue,
            self._simulator(workload, queue),
            fair_sharing=self.fair_sharing,
            resume=resume,
        )
        full = assigner.assign()
        chosen = self._viable(assigner, full)
        if chosen is None and can_be_partially_admitted(workload):
            chosen = search(
                workload, lambda counts: self._viable(assigner, assigner.assign(counts))
            )
        assignment, targets = chosen or (full, [])
        return Entry(workload, queue, assignment, targets)

    def _viable(
        self, assigner: FlavorAssigner, assignment: Assignment
    ) -> tuple[Assignment, list[Target]] | None:
        """The assignment and its victims if it fits or can preempt, else ``None``."""
        if assignment.fits:
            return assignment, []
        if assignment.needs_preemption:
            targets = self._targets(assigner.workload, assigner.queue, assignment)
            if targets:
                return assignment, targets
        return None

    def _targets(
        self, workload: Workload, queue: ClusterQueueNode, assignment: Assignment
    ) -> list[Target]:
        # A budget already fits wherever preemption is considered: victims are chosen
        # for the concurrent resources alone.
        budgets = queue.budget_resources
        usage = {fr: v for fr, v in assignment.usage.items() if fr.resource not in budgets}
        request = PreemptionRequest(workload, queue, usage, assignment.needs_preemption_in())
        return self.preemptor.targets(request)

    def _simulator(self, workload: Workload, queue: ClusterQueueNode) -> Simulator:
        def simulate(fr: FlavorResource, amount: int) -> tuple[Mode, int]:
            request = PreemptionRequest(workload, queue, {fr: amount}, frozenset((fr,)))
            targets = self.preemptor.targets(request)
            if not targets:
                return Mode.NO_CANDIDATES, find_borrow_level(queue, fr, amount)[0]
            with self.state.freed((t.record for t in targets), (fr,)):
                borrow = find_borrow_level(queue, fr, amount)[0]
            own = any(t.record.admission.cluster_queue == queue.name for t in targets)
            return (Mode.PREEMPT if own else Mode.RECLAIM), borrow

        return simulate

    # -- 3. ordering --------------------------------------------------------------------

    def _ordered(self, entries: list[Entry]) -> Iterator[Entry]:
        if not self.fair_sharing:
            yield from sorted(entries, key=_classical_key)
            return
        yield from fair_sharing_order(self.state, entries)

    # -- 4. processing ------------------------------------------------------------------

    def _process(self, entry: Entry, cycle: _Cycle, now: float, result: CycleResult) -> None:
        """Stages: refuse what fits nowhere or has no victims; skip what overlaps or
        no longer fits; evict or admit."""
        mode = entry.assignment.mode
        retry_flavors = entry.assignment.pending_flavors
        if mode is Mode.NO_FIT:
            entry.mark(Status.INADMISSIBLE, _no_fit_code(entry), None, immediate=retry_flavors)
            return
        if mode.needs_preemption and not entry.targets:
            entry.mark(
                Status.INADMISSIBLE,
                ReasonCode.NO_PREEMPTION_CANDIDATES,
                None,
                immediate=retry_flavors,
                prefix="needs preemption, but no workload may be preempted for it: ",
            )
            if entry.queue.spec.preemption.reclaim_within_cohort is not ReclaimWithinCohort.ANY:
                cycle.reserve(entry.queue, _to_reserve(entry, cycle))
            return
        if any(t.name in cycle.preempted for t in entry.targets):
            entry.mark(
                Status.SKIPPED,
                ReasonCode.NO_LONGER_FITS,
                "its preemption targets overlap with another workload's in this cycle",
                immediate=True,
            )
            return
        if not cycle.fits(entry.queue, entry.assignment.usage, entry.targets):
            entry.mark(
                Status.SKIPPED,
                ReasonCode.NO_LONGER_FITS,
                "no longer fits after processing another workload",
                immediate=True,
            )
            return
        if entry.targets:
            cycle.preempt(entry.workload.name, entry.targets)
            cycle.reserve(entry.queue, entry.assignment.usage)
            count = len(entry.targets)
            entry.mark(
                Status.PREEMPTING,
                ReasonCode.WAITING_FOR_PREEMPTION,
                f"waiting for the preemption of {count} workload{'s' if count > 1 else ''}",
                immediate=True,
            )
            return
        record = AdmittedWorkload(
            workload=entry.workload,
            admission=_admission(entry),
            usage=dict(entry.assignment.usage),
            admitted_at=now,
            started=self.state.now,
        )
        self.state.admit(record)
        entry.status = Status.ADMITTED
        result.admitted_records.append(record)


class _ScanState:
    """Where a workload's flavor scan stopped, and when."""

    __slots__ = ("cycle", "generation", "progress")

    def __init__(self, cycle: int, generation: int, progress: ScanProgress) -> None:
        self.cycle = cycle
        self.generation = generation
        self.progress = progress


class _Cycle:
    """What one cycle has done to usage so far: evictions issued, capacity held.

    With ``shadow``, each eviction is taken out of usage as it is issued and stays out
    until processing ends, so a fit check removes only its own targets: summed again
    at every check, a cycle's evictions cost each check as much as all before it. The
    tree's usage is a function of its queues' usage however the changes interleave
    (each node stores in its parent what exceeds its guaranteed part), so the checks
    see what removing everything at each check would show. Two things read usage as
    it is without the evictions: :meth:`used`, which adds them back, and a fair
    sharing order, which is why it takes no shadow. A negative reservation writes a
    queue's usage directly, past that function: the evictions are put back first,
    and the checks sum them again from then on."""

    def __init__(self, state: ClusterState, *, shadow: bool = False) -> None:
        self.state = state
        self.preempted: dict[str, tuple[AdmittedWorkload, Preemption]] = {}
        self.reserved: list[tuple[ClusterQueueNode, dict[FlavorResource, int]]] = []
        self.shadow = shadow
        self._applied: list[Freed] = []
        # Per queue and flavor-resource, what the applied evictions changed its usage by.
        self._shifts: dict[tuple[str, FlavorResource], int] = {}

    def used(self, queue: ClusterQueueNode, fr: FlavorResource) -> int:
        """The queue's own usage, with this cycle's evictions still in it."""
        used = queue.usage.get(fr, 0)
        return used - self._shifts.get((queue.name, fr), 0) if self._shifts else used

    def reserve(self, queue: ClusterQueueNode, usage: dict[FlavorResource, int]) -> None:
        """Hold capacity for the rest of the cycle. A negative amount (Kueue's
        reservation past a borrowing limit) lowers the queue's own usage only."""
        for fr, amount in usage.items():
            if amount > 0:
                add_usage(queue, fr, amount)
                continue
            if amount < 0:
                self._unshadow()
            queue.usage[fr] = queue.usage.get(fr, 0) + amount
        self.reserved.append((queue, usage))

    def release_reservations(self) -> None:
        self._unshadow()
        for queue, usage in reversed(self.reserved):
            for fr, amount in usage.items():
                if amount > 0:
                    remove_usage(queue, fr, amount)
                else:
                    queue.usage[fr] -= amount
        self.reserved.clear()

    def preempt(self, preemptor: str, targets: list[Target]) -> None:
        for target in targets:
            self.preempted[target.name] = (target.record, Preemption(preemptor, target.reason))
        if self.shadow:
            records = [t.record for t in targets]
            frs = {fr for record in records for fr in record.usage}
            freed = self.state.freed(records, frs, ended=True)
            freed.apply()
            self._applied.append(freed)
            shifts = self._shifts
            for queue, fr, amount in freed.changes:
                key = (queue.name, fr)
                shifts[key] = shifts.get(key, 0) + amount

    def _unshadow(self) -> None:
        """Put the applied evictions back; later checks sum them (see the class)."""
        self.shadow = False
        for freed in reversed(self._applied):
            freed.undo()
        self._applied.clear()
        self._shifts.clear()

    def fits(
        self, queue: ClusterQueueNode, usage: dict[FlavorResource, int], targets: list[Target]
    ) -> bool:
        """Does ``usage`` fit once everything preempted so far, and ``targets``, is gone
        (their real use of budgets charged)?"""
        budgets = queue.budget_resources
        if all(
            fr.resource not in budgets and queue_available(queue, fr) >= amount
            for fr, amount in usage.items()
        ):
            # Taking workloads away only adds room; only budgets can lose some (their
            # use is charged), and none is asked for.
            return True
        if self.shadow:
            gone: Iterable[AdmittedWorkload] = [t.record for t in targets]
        else:
            before = {name: record for name, (record, _) in self.preempted.items()}
            gone = (before | {t.name: t.record for t in targets}).values()
        with self.state.freed(gone, usage.keys(), ended=True):
            return all(queue_available(queue, fr) >= amount for fr, amount in usage.items())


def _classical_key(entry: Entry) -> tuple[int, int, float, str]:
    """Less borrowing first, then higher priority, then older, then by name."""
    workload = entry.workload
    return (entry.assignment.borrowing, -workload.priority, workload.order_time, workload.name)


def _to_reserve(entry: Entry, cycle: _Cycle) -> dict[FlavorResource, int]:
    """Capacity a preemptor without victims holds for the rest of the cycle."""
    queue = entry.queue
    borrowing = entry.assignment.borrowing > 0
    reserved = {}
    for fr, amount in entry.assignment.usage.items():
        quota = queue.quota(fr)
        used = cycle.used(queue, fr)
        if borrowing:
            limit = quota.borrowing_limit
            reserved[fr] = amount if limit is None else min(amount, quota.nominal + limit - used)
        else:
            reserved[fr] = max(0, min(amount, quota.nominal - used))
    return reserved


def _admission(entry: Entry) -> Admission:
    return Admission(
        cluster_queue=entry.queue.name,
        pod_sets=tuple(
            PodSetAssignment(
                name=p.name,
                count=p.count,
                flavors={resource: choice.flavor for resource, choice in p.flavors.items()},
            )
            for p in entry.assignment.pod_sets
        ),
    )


def _no_fit_code(entry: Entry) -> ReasonCode:
    blockers = entry.assignment.blockers
    return blockers[-1].code if blockers else ReasonCode.INSUFFICIENT_QUOTA
