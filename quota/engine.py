"""The quota engine's public face: load a configuration, add and release
workloads, run admission cycles, read decisions and reasons."""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from fractions import Fraction

from quota.budgets import from_hours, is_budget, strip_budgets
from quota.cache import AdmittedWorkload, ClusterQueueNode, ClusterState
from quota.errors import WorkloadError
from quota.model import Admission, PodSetAssignment, QuotaConfig, Workload
from quota.periods import period_end
from quota.queues import QueueManager
from quota.reasons import PendingReason, ReasonCode
from quota.resources import FlavorResource
from quota.scheduler import CycleResult, Preemption, Scheduler

__all__ = ["QuotaEngine"]

Clock = Callable[[], float]


class QuotaEngine:
    """Kueue's admission semantics over one quota configuration, in memory.

    Usage::

        engine = QuotaEngine(config)
        engine.add(workload)
        cycle = engine.schedule_once()     # or engine.schedule() until quiet
        cycle.admitted, cycle.preempted, engine.reason("w2")
    """

    def __init__(
        self,
        config: QuotaConfig,
        *,
        clock: Clock = time.time,
        now: datetime | None = None,
        reference_preemption: bool = False,
    ) -> None:
        """``clock`` orders admissions; ``now`` is the budget clock's time (UTC),
        moved only by :meth:`advance_to`. ``reference_preemption`` chooses victims the
        plain, slow way (:mod:`quota.preemption.classical_reference`), for tests that
        check the fast way decides the same."""
        self.config = config
        self.state = ClusterState.build(config)
        self.state.now = now if now is not None else datetime.now(UTC)
        self.queues = QueueManager(config.cluster_queues)
        self._pending: dict[str, Workload] = {}
        # Pending workloads that need budget but have no max runtime: never tried.
        self._unrunnable: set[str] = set()
        # Pending workloads that need budget: from when what they would commit shrinks
        # (their max runtime would reach past the period's end), and the soonest of those.
        self._refresh_at: dict[str, datetime] = {}
        self._next_refresh = datetime.max.replace(tzinfo=UTC)
        self._reasons: dict[str, PendingReason] = {}
        self._preemptions: dict[str, Preemption] = {}
        self._scheduler = Scheduler(
            self.state,
            self.queues,
            fair_sharing=config.fair_sharing,
            reference=reference_preemption,
        )
        self._clock = clock

    # -- reading -------------------------------------------------------------------------

    @property
    def admitted(self) -> Mapping[str, AdmittedWorkload]:
        return self.state.admitted

    def pending(self) -> Iterator[Workload]:
        """Pending workloads as the engine sees them: a pod that needs budget also asks
        for what it would commit of it (``<resource>-hours``, see quota.budgets)."""
        return iter(self._pending.values())

    def reason(self, name: str) -> PendingReason | None:
        """Why a pending workload waits (``None`` if it is not pending)."""
        workload = self._pending.get(name)
        if workload is None:
            return None
        queue = workload.cluster_queue
        if name in self._unrunnable:
            return PendingReason(
                ReasonCode.MAX_RUNTIME_REQUIRED,
                f"needs a max runtime: cluster queue {queue} meters it against a GPU-hour"
                " budget and has no default_max_runtime",
            )
        if self.state.queues[queue].spec.stopped:
            return PendingReason(ReasonCode.QUEUE_STOPPED, f"cluster queue {queue} is stopped")
        # A class set aside with its head since this one's own last try: the head's.
        shared = self.queues.reason(workload)
        if shared is not None:
            return shared
        return self._reasons.get(name) or PendingReason(
            ReasonCode.QUEUED, f"not yet considered: other workloads of {queue} are ahead of it"
        )

    def preemption(self, name: str) -> Preemption | None:
        """By whom and why the workload was last preempted, if it was (and waits since)."""
        return self._preemptions.get(name) if name in self._pending else None

    # -- changing ------------------------------------------------------------------------

    def add(self, workload: Workload) -> None:
        """Queue a new workload; it waits for a cycle to admit it."""
        self._check_new(workload)
        self._pending[workload.name] = workload
        self._enqueue(workload)

    def add_admitted(
        self,
        workload: Workload,
        admission: Admission,
        *,
        admitted_at: float | None = None,
        started: datetime | None = None,
    ) -> None:
        """Record a workload that already holds quota (e.g. restored from storage).
        ``started`` (default: now) is when its run began on the budget clock; its
        commitment is counted from then, not checked against the budget."""
        self._check_new(workload)
        if admission.cluster_queue != workload.cluster_queue:
            raise WorkloadError(f"workload {workload.name!r} is admitted in another queue")
        known = {p.name for p in workload.pod_sets}
        unknown = [p.name for p in admission.pod_sets if p.name not in known]
        if unknown:
            raise WorkloadError(f"workload {workload.name!r} has no pod set {unknown[0]!r}")
        began: datetime | None = self.state.now if started is None else started
        try:
            workload = self.state.with_budgets(workload, started or self.state.now)
            admission = _with_budget_flavors(admission, self.state.queues[workload.cluster_queue])
        except LookupError:
            began = None  # no max runtime: nothing to commit, nothing to charge
        self.state.admit(
            AdmittedWorkload(
                workload=workload,
                admission=admission,
                usage=admission.usage(workload),
                admitted_at=workload.created if admitted_at is None else admitted_at,
                started=began,
            )
        )

    def finish(self, name: str) -> AdmittedWorkload:
        """The workload completed: release its quota."""
        if name not in self.state.admitted:
            state = "pending" if name in self._pending else "unknown"
            raise WorkloadError(
                f"workload {name!r} is not admitted ({state}); only admitted work finishes"
            )
        return self._release(name)

    def delete(self, name: str) -> None:
        """Withdraw a workload, pending or admitted."""
        if name in self.state.admitted:
            self._release(name)
        elif name in self._pending:
            workload = self._pending.pop(name)
            self._refresh_at.pop(name, None)
            self._reasons.pop(name, None)
            self._preemptions.pop(name, None)
            self._unrunnable.discard(name)
            self.queues.remove(workload)
            self._scheduler.forget(name)
        else:
            raise WorkloadError(f"workload {name!r} is neither pending nor admitted")

    def schedule_once(self) -> CycleResult:
        """Run one admission cycle."""
        with _CollectorPaused():
            result = self._scheduler.schedule_once(self._clock())
        for record in result.admitted_records:
            self._pending.pop(record.name, None)
            self._refresh_at.pop(record.name, None)
            self._reasons.pop(record.name, None)
            self._preemptions.pop(record.name, None)
        for record in result.preempted_records:
            # A new run later: its commitment is counted again from its new admission.
            self._pending[record.name] = strip_budgets(record.workload)
            self._enqueue(self._pending[record.name])
        self._reasons.update(result.reasons)
        self._preemptions.update(result.preemptions)
        return result

    def schedule(self, max_cycles: int | None = None) -> list[CycleResult]:
        """Run ``max_cycles`` cycles, or until quiet (see :meth:`cycles`)."""
        return list(self.cycles(max_cycles))

    def cycles(self, max_cycles: int | None = None) -> Iterator[CycleResult]:
        """Run cycles one at a time as they are consumed: ``max_cycles`` of them, or
        until a cycle changes nothing and every head has been tried since the last
        change (a StrictFIFO head that never fits does not keep it going)."""
        if max_cycles is not None:
            for _ in range(max_cycles):
                yield self.schedule_once()
            return
        tried: set[str] = set()
        # Bound on runaway preemption loops; far above what any real sequence takes.
        limit = 100 * (len(self._pending) + len(self.state.admitted) + 10)
        for _ in range(limit):
            result = self.schedule_once()
            yield result
            if result.changed:
                tried.clear()
                continue
            if not result.heads or tried.issuperset(result.heads):
                return
            tried.update(result.heads)

    # -- budgets -------------------------------------------------------------------------

    @property
    def now(self) -> datetime:
        return self.state.now

    def advance_to(self, moment: datetime) -> None:
        """Move the budget clock forward. Crossing into a new period restarts charges at
        zero and recounts running workloads' commitments; pending workloads are
        tried again with what they would now commit. Nothing is scheduled."""
        if moment < self.state.now:
            raise WorkloadError(f"the clock cannot go back (from {self.state.now} to {moment})")
        rolled = self.state.advance(moment)
        if rolled or moment >= self._next_refresh:
            # Only what a workload would commit changes; most commit their whole
            # runtime until it would reach past the period's end.
            due = [
                self._pending[name]
                for name, at in self._refresh_at.items()
                if rolled or at <= moment
            ]
            for workload in due:
                self._enqueue(workload)
            self._next_refresh = min(
                self._refresh_at.values(), default=datetime.max.replace(tzinfo=UTC)
            )
        if rolled:
            self.queues.requeue_inadmissible(self.state.queues)

    def charge(self, cluster_queue: str, flavor: str, resource: str, hours: Fraction) -> None:
        """Charge a queue for budget used this period by runs that ended (e.g. what a
        ledger recorded); ``resource`` is a budget resource."""
        queue = self.state.queues.get(cluster_queue)
        if queue is None:
            raise WorkloadError(f"unknown cluster queue {cluster_queue!r}")
        if not is_budget(resource):
            raise WorkloadError(f"{resource!r} is not a budget resource")
        self.state.charge_budget(queue, FlavorResource(flavor, resource), from_hours(hours))

    def budgets(self) -> dict[str, dict[FlavorResource, tuple[int, int]]]:
        """(charged, committed) this period per level and budget flavor-resource, in
        tree units (see :mod:`quota.budgets`)."""
        return self.state.budget_levels()

    # -- helpers -------------------------------------------------------------------------

    def _enqueue(self, workload: Workload) -> None:
        """Queue ``workload`` as the tree sees it now (with what its run would commit),
        replacing what was queued for it; or hold it back if it cannot be run."""
        shared = self.queues.reason(workload)
        if shared is not None:
            self._reasons[workload.name] = shared  # queued anew, it would join after it
        self.queues.remove(workload)
        self._unrunnable.discard(workload.name)
        self._refresh_at.pop(workload.name, None)
        try:
            effective = self.state.with_budgets(workload)
        except LookupError:
            self._unrunnable.add(workload.name)
            return
        self.queues.add(effective)
        # One object per pending workload: the queue's (with what it would commit).
        self._pending[workload.name] = effective
        if effective is not workload and effective.max_runtime is not None:
            end = period_end(self.config.budget_period, self.state.now)
            at = end - timedelta(seconds=float(effective.max_runtime))
            self._refresh_at[workload.name] = at
            self._next_refresh = min(self._next_refresh, at)

    def _check_new(self, workload: Workload) -> None:
        if workload.cluster_queue not in self.state.queues:
            raise WorkloadError(f"unknown cluster queue {workload.cluster_queue!r}")
        if workload.name in self._pending or workload.name in self.state.admitted:
            raise WorkloadError(f"workload {workload.name!r} already exists")
        # Quota arithmetic and the preemption searches' early exits rely on it.
        for pod_set in workload.pod_sets:
            if pod_set.count < 0 or min(pod_set.requests.values(), default=0) < 0:
                raise WorkloadError(
                    f"workload {workload.name!r}: pod set {pod_set.name!r} asks for a "
                    "negative amount (pods or a resource)"
                )

    def _release(self, name: str) -> AdmittedWorkload:
        record = self.state.release(name)
        self._scheduler.quota_released(record.admission.cluster_queue)
        return record


class _CollectorPaused:
    """The cyclic garbage collector off while a cycle runs (unless it was off already).

    A cycle makes objects that live as long as it does: nominations, assignments,
    candidate lists, a few for every queue with a head. Over thousands of queues they
    outnumber the collector's young generation, so a cycle set off young collections
    of its own, each walking those objects and, through them, the engine's state:
    measured, a fifth of the CPU time of ``bench/admission.py --completions`` at
    300,000 workloads on 3,000 queues. They are freed by their reference counts when the
    cycle ends; what survives it is collected after, as any other allocation. A class,
    not a @contextmanager, which stays interpreted Python even in the compiled engine."""

    __slots__ = ("_was_on",)

    def __init__(self) -> None:
        self._was_on = False

    def __enter__(self) -> None:
        self._was_on = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was_on:
            gc.enable()


def _with_budget_flavors(admission: Admission, queue: ClusterQueueNode) -> Admission:
    """An admission as stored may name only the metered resources; the budget that
    meters each takes its flavor (they share a resource group)."""
    if not queue.budgets:
        return admission
    pod_sets = []
    for assigned in admission.pod_sets:
        flavors = dict(assigned.flavors)
        for resource, budget in queue.budgets.items():
            if resource in flavors:
                flavors.setdefault(budget, flavors[resource])
        pod_sets.append(PodSetAssignment(assigned.name, assigned.count, flavors))
    return dataclasses.replace(admission, pod_sets=tuple(pod_sets))
