"""The quota engine's public face: load a configuration, add and release
workloads, run admission cycles, read decisions and reasons."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping

from quota.cache import AdmittedWorkload, ClusterState
from quota.errors import WorkloadError
from quota.model import Admission, QuotaConfig, Workload
from quota.queues import QueueManager
from quota.reasons import PendingReason, ReasonCode
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

    def __init__(self, config: QuotaConfig, *, clock: Clock = time.time) -> None:
        self.config = config
        self.state = ClusterState.build(config)
        self.queues = QueueManager(config.cluster_queues)
        self._pending: dict[str, Workload] = {}
        self._reasons: dict[str, PendingReason] = {}
        self._preemptions: dict[str, Preemption] = {}
        self._scheduler = Scheduler(self.state, self.queues, fair_sharing=config.fair_sharing)
        self._clock = clock

    # -- reading -------------------------------------------------------------------------

    @property
    def admitted(self) -> Mapping[str, AdmittedWorkload]:
        return self.state.admitted

    def pending(self) -> Iterator[Workload]:
        return iter(self._pending.values())

    def reason(self, name: str) -> PendingReason | None:
        """Why a pending workload waits (``None`` if it is not pending)."""
        workload = self._pending.get(name)
        if workload is None:
            return None
        queue = workload.cluster_queue
        if self.state.queues[queue].spec.stopped:
            return PendingReason(ReasonCode.QUEUE_STOPPED, f"cluster queue {queue} is stopped")
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
        self.queues.add(workload)

    def add_admitted(
        self, workload: Workload, admission: Admission, *, admitted_at: float | None = None
    ) -> None:
        """Record a workload that already holds quota (e.g. restored from storage)."""
        self._check_new(workload)
        if admission.cluster_queue != workload.cluster_queue:
            raise WorkloadError(f"workload {workload.name!r} is admitted in another queue")
        known = {p.name for p in workload.pod_sets}
        unknown = [p.name for p in admission.pod_sets if p.name not in known]
        if unknown:
            raise WorkloadError(f"workload {workload.name!r} has no pod set {unknown[0]!r}")
        self.state.admit(
            AdmittedWorkload(
                workload=workload,
                admission=admission,
                usage=admission.usage(workload),
                admitted_at=workload.created if admitted_at is None else admitted_at,
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
            self._reasons.pop(name, None)
            self._preemptions.pop(name, None)
            self.queues.remove(workload)
            self._scheduler.forget(name)
        else:
            raise WorkloadError(f"workload {name!r} is neither pending nor admitted")

    def schedule_once(self) -> CycleResult:
        """Run one admission cycle."""
        result = self._scheduler.schedule_once(self._clock())
        for record in result.admitted_records:
            self._pending.pop(record.name, None)
            self._reasons.pop(record.name, None)
            self._preemptions.pop(record.name, None)
        for record in result.preempted_records:
            self._pending[record.name] = record.workload
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

    # -- helpers -------------------------------------------------------------------------

    def _check_new(self, workload: Workload) -> None:
        if workload.cluster_queue not in self.state.queues:
            raise WorkloadError(f"unknown cluster queue {workload.cluster_queue!r}")
        if workload.name in self._pending or workload.name in self.state.admitted:
            raise WorkloadError(f"workload {workload.name!r} already exists")

    def _release(self, name: str) -> AdmittedWorkload:
        record = self.state.release(name)
        self._scheduler.quota_released(record.admission.cluster_queue)
        return record
