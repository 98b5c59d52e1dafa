"""From quota to compute: submit admitted workloads to their backend, follow them
to the end, stop what was preempted or cancelled.

Each pass:
  1. admitted -> note the job's name on the row, then submit the job (named
     ``<workload>-<attempt>``, so a retry after a crash is a no-op and a re-admission
     after preemption is a new job) -> running. Noted first, so a preemption or cancel
     landing between the submit and the row's change to running finds the job named and
     stops it (4, 3) instead of leaving it running unseen; a job of an earlier attempt
     still named (re-admitted before its stop was seen through) is stopped first;
  2. running -> if the backend says it ended: succeeded / failed / cancelled, which
     releases its quota (the admission loop counts only admitted and running work);
     while it lasts, the backend's own job id, state and pending reason are noted;
  3. cancel requested -> stop the job; once stopped: cancelled;
  4. preempted (pending again, job still named) -> stop the job, forget it;
  5. running -> if the backend no longer knows the job or lost it: lost, back to pending
     (requeued), to run again as a new attempt.
A backend that keeps what it learns within a pass (``PassScoped``: Slurm reads its job
list once per pass to find jobs by name) is told when each pass begins.
Every row change is guarded by the row's version, like the admission loop's, and its
event (dispatched, adopted, running, requeued, lost, finished, failed, cancelled) is
written in the same transaction, only if the change was.

Reconciling with the backend: a submit that finds the job already there (a gateway that
died between submitting and noting it) is recorded as ``adopted``, not submitted again; a
running job the backend no longer knows (``JobState.UNKNOWN``: Slurm forgot it after
MinJobAge or lost its state, a Ray head came back without its jobs) or ended through a
failure of its own (``JobState.LOST``: Ray's job supervisor died with the head) is
``lost``: the workload goes back to pending and runs again as a new attempt, never failed
silently; a workload whose job was lost ``max_lost_runs`` times is failed, saying so
(``LostTooOften``), rather than requeued for ever: a job that takes its backend down
with it (a Ray head killed by the job's memory, say) would otherwise do so again and again.

Which backend: the one the workload names, else the one its admitted flavors name
(``flavor_backends``), else ``local``; it is noted on the row when the job is submitted
(``backend``), so the job is followed and stopped there even after a preemption has
cleared the admission. A backend that cannot be reached (``BackendError`` from submit,
status or cancel) makes the workload wait, saying so; nothing is failed or submitted
twice for it (a backend finds a job it already has by its name).

A job carries the workload's limits (``job_limits``): memory and CPU summed over its pods
as admitted. A backend that refuses every job (the local backend when it cannot isolate
jobs) fails the workload at once ("BackendRefused") rather than running it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, func, or_
from sqlmodel import col, select

from gateway.backends import (
    Backend,
    BackendError,
    Identifying,
    InvalidJobError,
    JobLimits,
    JobRefusedError,
    JobRejectedError,
    JobSpec,
    JobState,
    JobStatus,
    PassScoped,
    PodShape,
)
from gateway.observability import Observability
from quota.resources import MILLI, parse_quantity
from tenants import Database
from tenants.models import WorkloadEventRow, WorkloadRow
from tenants.models._base import utcnow
from tenants.services.workloads import record_event, update_if_unchanged

__all__ = ["DispatchResult", "Dispatcher", "job_limits", "job_pods"]

log = logging.getLogger(__name__)

_LIMITED = ("memory", "cpu")
PASS_BATCH = 500  # rows a dispatch pass reads at a time
GPU = "nvidia.com/gpu"
LOCAL = "local"
UNAVAILABLE = "BackendUnavailable"
DISPATCHED = "Dispatched"
LOST = "Lost"
LOST_TOO_OFTEN = "LostTooOften"
# How each end is told in the workload's events.
_END_EVENTS = {"succeeded": "finished", "failed": "failed", "cancelled": "cancelled"}

Event = tuple[str, dict[str, Any]]


@dataclass
class DispatchResult:
    started: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)


class Dispatcher:
    def __init__(
        self,
        database: Database,
        backends: Mapping[str, Backend],
        flavor_backends: Mapping[str, str] | None = None,
        *,
        observe: Observability | None = None,
        max_lost_runs: int = 5,
        batch: int = PASS_BATCH,
    ) -> None:
        if max_lost_runs < 1:
            raise ValueError(f"max_lost_runs must be at least 1, not {max_lost_runs}")
        if batch < 1:
            raise ValueError(f"batch must be at least 1, not {batch}")
        self.batch = batch
        self.database = database
        self.backends = backends
        self.observe = observe or Observability()
        self.max_lost_runs = max_lost_runs
        self.flavor_backends: Mapping[str, str] = (
            flavor_backends if flavor_backends is not None else {}
        )

    def backend_of(self, row: WorkloadRow) -> str:
        """The backend a row's job goes (or went) to."""
        named: str | None = row.spec.get("backend")
        if row.state != "admitted" and row.backend is not None:
            return row.backend  # where its job was sent
        if named:
            return named
        chosen = {
            self.flavor_backends[flavor]
            for pod_set in (row.admission or {}).get("pod_sets", [])
            for flavor in pod_set.get("flavors", {}).values()
            if flavor in self.flavor_backends
        }
        # A gang runs in one place: flavors of two backends cannot host one job.
        return sorted(chosen)[0] if len(chosen) == 1 else (LOCAL if not chosen else "")

    async def run_pass(self) -> DispatchResult:
        result = DispatchResult()
        for each in list(self.backends.values()):
            if isinstance(each, PassScoped):
                each.begin_pass()  # what it learned in the last pass is stale now
        after: str | None = None
        while True:
            rows = await self._batch(after)
            for row in rows:
                await self._pass_one(row, result)
            if len(rows) < self.batch:
                return result
            after = rows[-1].id

    async def _batch(self, after: str | None) -> Sequence[WorkloadRow]:
        """The next ``batch`` rows a pass looks at, by id after ``after``: a pass holds
        one batch at a time, not every running workload of the platform (each with its
        spec). A row that changes meanwhile is seen as it is when its batch is read."""
        query = select(WorkloadRow).where(
            or_(
                col(WorkloadRow.state).in_(("admitted", "running")),
                and_(col(WorkloadRow.state) == "pending", col(WorkloadRow.job_id).is_not(None)),
            )
        )
        if after is not None:
            query = query.where(col(WorkloadRow.id) > after)
        async with self.database.session() as session:
            return (await session.exec(query.order_by(col(WorkloadRow.id)).limit(self.batch))).all()

    async def _pass_one(self, row: WorkloadRow, result: DispatchResult) -> None:
        name = self.backend_of(row)
        backend = self.backends.get(name)
        if backend is None:
            message = (
                f"no backend {name!r} is configured"
                if name
                else "its flavors name different backends; a gang runs on one"
            )
            await self._end(row, "failed", "UnknownBackend", message)
            result.finished.append(row.id)
        elif row.state == "pending" or row.cancel_requested:
            await self._stop(row, backend, result)
        elif row.state == "admitted":
            await self._start(row, backend, result)
        else:
            await self._follow(row, backend, result)

    async def _start(self, row: WorkloadRow, backend: Backend, result: DispatchResult) -> None:
        job_id = f"{row.id}-{row.attempt}"
        if row.job_id != job_id and not await self._named(row, job_id, backend):
            return  # an earlier job still stopping, or the row changed: next pass
        job = row.spec["job"]
        try:
            spec = JobSpec(
                job_id,
                tuple(job["command"]),
                dict(job.get("env", {})),
                int(row.spec["max_runtime_seconds"]),
                job_limits(row.spec, row.admission),
                job_pods(row.spec, row.admission),
                tenant=row.tenant,
                queue=row.queue,
                options=row.spec.get("options", {}),
            )
        except (InvalidJobError, ValueError) as err:
            await self._end(row, "failed", "InvalidJob", str(err))
            result.finished.append(row.id)
            return
        try:
            # True: the backend already had a job of that name (a gateway that crashed
            # between submitting and noting it): it is followed, not submitted again.
            attributes = {"ignara.workload": row.id, "ignara.backend": backend.name}
            with self.observe.span("workload.dispatch", attributes):
                found = await backend.submit(spec)
        except (JobRefusedError, JobRejectedError) as err:
            await self._end(row, "failed", "BackendRefused", str(err))
            result.finished.append(row.id)
            return
        except BackendError as err:
            await self._waiting(row, err)
            return  # quota stays held; the next pass tries again
        known = backend.backend_job_id(job_id) if isinstance(backend, Identifying) else None
        # Not written when the row changed meanwhile (preempted, cancelled): the job is
        # named on it, so the next pass stops it.
        if await self._guarded(
            row,
            (
                "adopted" if found is True else "dispatched",
                {"backend": backend.name, "job": job_id, "backend_job_id": known},
            ),
            state="running",
            job_id=job_id,
            backend=backend.name,
            backend_job_id=known,
            backend_state=None,
            started_at=None,
            exit_code=None,
            reason_code=DISPATCHED,
            reason_message=(
                f"found already submitted to the {backend.name} backend"
                if found is True
                else f"submitted to the {backend.name} backend"
            ),
        ):
            result.started.append(row.id)
            self.observe.events.info(
                "workload.adopted" if found is True else "workload.dispatched",
                workload=row.id,
                tenant=row.tenant,
                queue=row.queue,
                backend=backend.name,
                job=job_id,
                backend_job_id=known,
            )

    async def _named(self, row: WorkloadRow, job_id: str, backend: Backend) -> bool:
        """Note ``job_id`` (and its backend) on the admitted row before its job exists;
        False when it cannot be yet: a job of an earlier attempt is still named and not
        stopped, or the row changed since it was read."""
        if row.job_id is not None:
            earlier = self.backends.get(row.backend or "")
            if earlier is not None:
                try:
                    await earlier.cancel(row.job_id)
                    status = await earlier.status(row.job_id)
                    if status.state in (JobState.PENDING, JobState.RUNNING):
                        return False  # stopping; look again next pass
                except BackendError as err:
                    log.warning("cannot stop job %s on %s yet: %s", row.job_id, earlier.name, err)
                    return False
        return await self._guarded(row, None, job_id=job_id, backend=backend.name)

    async def _follow(self, row: WorkloadRow, backend: Backend, result: DispatchResult) -> None:
        if row.job_id is None:
            return
        try:
            status = await backend.status(row.job_id)
        except BackendError as err:
            await self._waiting(row, err)  # it may well still run there: look again
            return
        noted = _noted(status)
        if status.state in (JobState.UNKNOWN, JobState.LOST):
            await self._lost(row, backend, status, result)
            return
        if status.state in (JobState.PENDING, JobState.RUNNING):
            event: Event | None = None
            if status.state is JobState.PENDING:
                reason = ("BackendPending", status.message or f"pending on {backend.name}")
            else:
                reason = ("Running", f"running on the {backend.name} backend")
                if await self._starts_running(row):
                    detail = {"backend": backend.name, "backend_job_id": status.backend_job_id}
                    event = ("running", detail)
            if (
                event is not None
                or (row.reason_code, row.reason_message) != reason
                or any(getattr(row, k) != v for k, v in noted.items())
            ):
                await self._guarded(
                    row, event, reason_code=reason[0], reason_message=reason[1][:2000], **noted
                )
            return
        outcome = {
            JobState.SUCCEEDED: ("succeeded", "Succeeded"),
            JobState.CANCELLED: ("cancelled", "Cancelled"),
        }.get(status.state, ("failed", "Failed"))
        message = status.message or f"exited with code {status.exit_code}"
        await self._end(row, outcome[0], outcome[1], message, **noted)
        result.finished.append(row.id)

    async def _events(self, row: WorkloadRow, kind: str, *, this_attempt: bool = False) -> int:
        """How many ``kind`` events the workload has (in its current attempt only)."""
        query = (
            select(func.count())
            .select_from(WorkloadEventRow)
            .where(WorkloadEventRow.workload_id == row.id, WorkloadEventRow.type == kind)
        )
        if this_attempt:
            query = query.where(WorkloadEventRow.attempt == row.attempt)
        async with self.database.session() as session:
            return int((await session.exec(query)).one())

    async def _starts_running(self, row: WorkloadRow) -> bool:
        """Whether a job seen running was not yet seen running in this attempt."""
        if row.reason_code in (DISPATCHED, "BackendPending"):
            return True
        if row.reason_code != UNAVAILABLE:
            return False  # "Running" (seen before) or "Cancelling"
        # Back from an outage: the row no longer says whether it ran before; its events do.
        return not await self._events(row, "running", this_attempt=True)

    async def _lost(
        self, row: WorkloadRow, backend: Backend, status: JobStatus, result: DispatchResult
    ) -> None:
        """The backend no longer knows a job the gateway thinks running (it forgot it after
        its MinJobAge while the gateway was away, or lost its state), or lost it (ended it
        through a failure of its own): the run is lost, not failed; the workload waits for
        quota again and runs as a new attempt, unless this was its ``max_lost_runs``-th lost
        run: then it fails (``LostTooOften``)."""
        job = f"job {row.job_id}{f' ({row.backend_job_id})' if row.backend_job_id else ''}"
        lost = {
            "backend": backend.name,
            "job": row.job_id,
            "backend_job_id": row.backend_job_id,
            "message": status.message,
        }
        self.observe.events.warning(
            "workload.lost", workload=row.id, tenant=row.tenant, queue=row.queue, **lost
        )
        if status.state is JobState.LOST:
            what = f"the {backend.name} backend lost {job} ({status.message})"
        else:
            what = f"the {backend.name} backend no longer knows {job}"
        times = await self._events(row, "lost") + 1  # this one not yet written
        if times >= self.max_lost_runs:
            message = f"{what}; its runs were lost {times} times, so it is not run again"
            await self._end(row, "failed", LOST_TOO_OFTEN, message, lost=lost)
            result.finished.append(row.id)
            return
        message = f"{what}; it runs again"
        await self._guarded(
            row,
            ("lost", lost),
            ("requeued", {"why": "lost"}),
            state="pending",
            admission=None,
            admitted_at=None,
            job_id=None,
            reason_code=LOST,
            reason_message=message[:2000],
            reason_detail=None,
        )
        result.stopped.append(row.id)

    async def _stop(self, row: WorkloadRow, backend: Backend, result: DispatchResult) -> None:
        noted: dict[str, Any] = {}
        if row.job_id is not None:
            try:
                await backend.cancel(row.job_id)
                status = await backend.status(row.job_id)
            except BackendError as err:
                # Not stopped yet: a preempted workload keeps its "Preempted" reason and a
                # cancelled one stays cancel-requested; the next pass tries again.
                log.warning("cannot stop job %s on %s yet: %s", row.job_id, backend.name, err)
                return
            if status.state in (JobState.PENDING, JobState.RUNNING):
                return  # stopping; look again next pass
            noted = _noted(status)
        if row.state == "pending" and not row.cancel_requested:
            # preempted: its job is gone, it waits for quota
            requeued = {"why": "preempted", "backend": backend.name, "job": row.job_id}
            await self._guarded(row, ("requeued", requeued), job_id=None, **noted)
        else:
            await self._end(row, "cancelled", "Cancelled", "cancelled by request", **noted)
        result.stopped.append(row.id)

    async def _waiting(self, row: WorkloadRow, err: BackendError) -> None:
        """The backend did not answer: say so on the row (once), change nothing else."""
        message = str(err)[:2000]
        if (row.reason_code, row.reason_message) != (UNAVAILABLE, message):
            await self._guarded(row, None, reason_code=UNAVAILABLE, reason_message=message)

    async def _end(
        self,
        row: WorkloadRow,
        state: str,
        code: str,
        message: str,
        *,
        lost: dict[str, Any] | None = None,
        **noted: Any,
    ) -> None:
        """End the row's run (and the workload) as ``state``; ``lost``: the run was lost
        (its event is written first, in the same transaction)."""
        detail = {
            "exit_code": noted.get("exit_code", row.exit_code),
            "message": message[:500],
            "backend": row.backend,
            "backend_job_id": noted.get("backend_job_id", row.backend_job_id),
        }
        if await self._guarded(
            row,
            ("lost", lost) if lost is not None else None,
            (_END_EVENTS[state], detail),
            state=state,
            finished_at=utcnow(),
            reason_code=code,
            reason_message=message[:2000],
            reason_detail=None,
            **noted,
        ):
            self.observe.events.info(
                "workload.finished",
                workload=row.id,
                tenant=row.tenant,
                queue=row.queue,
                state=state,
                reason=code,
                exit_code=detail["exit_code"],
                backend=row.backend,
            )

    async def _guarded(self, row: WorkloadRow, *events: Event | None, **values: Any) -> bool:
        """Write only if the row is as read, with its events in the same transaction; a lost
        race writes neither and is retried next pass. True when written (``row`` is then
        as written, so the pass may change it again)."""
        async with self.database.session() as session:
            if not await update_if_unchanged(session, row, **values):
                return False
            for event in events:
                if event is not None:
                    record_event(session, row, event[0], event[1])
        row.version += 1
        for name, value in values.items():
            setattr(row, name, value)
        return True


def _noted(status: JobStatus) -> dict[str, Any]:
    """The backend's own id and state word for the job, when it started and how it exited,
    as the row keeps them."""
    noted: dict[str, Any] = {}
    if status.started_at is not None:
        noted["started_at"] = status.started_at
    if status.state.is_final:
        noted["exit_code"] = status.exit_code
    if status.backend_job_id is not None:
        noted["backend_job_id"] = status.backend_job_id[:64]
    if status.backend_state:
        noted["backend_state"] = status.backend_state[:32]
    return noted


def job_pods(spec: Mapping[str, Any], admission: Mapping[str, Any] | None) -> tuple[PodShape, ...]:
    """The gang's shape as admitted: per pod set, its pods and each pod's GPUs, CPU and
    memory. Raises ``ValueError`` (``QuantityError``, ``InvalidJobError``)."""
    admitted = {p["name"]: p["count"] for p in (admission or {}).get("pod_sets", [])}
    # The flavor a pod set was admitted on: its GPUs' if it asks for any, else the first.
    flavors = {
        p["name"]: p.get("flavors", {}).get(GPU) or min(p.get("flavors", {}).values(), default="")
        for p in (admission or {}).get("pod_sets", [])
    }
    pods = []
    for pod_set in spec["pod_sets"]:
        requests = pod_set["requests"]
        quantity = {r: parse_quantity(requests[r]) for r in (GPU, "cpu", "memory") if r in requests}
        pods.append(
            PodShape(
                count=admitted.get(pod_set["name"], pod_set["count"]),
                gpus=-(-quantity.get(GPU, 0) // MILLI),
                cpu_millis=quantity.get("cpu") or None,
                memory_bytes=-(-quantity["memory"] // MILLI) if quantity.get("memory") else None,
                name=pod_set["name"],
                flavor=flavors.get(pod_set["name"], ""),
            )
        )
    return tuple(pods)


def job_limits(spec: Mapping[str, Any], admission: Mapping[str, Any] | None) -> JobLimits:
    """The whole workload's memory and CPU: over its pod sets, pods (as admitted) times the
    per-pod request. A pod set that requests none adds none; a resource no pod set requests
    is not limited. Raises ``ValueError`` (``QuantityError``, ``InvalidJobError``)."""
    admitted = {p["name"]: p["count"] for p in (admission or {}).get("pod_sets", [])}
    totals = dict.fromkeys(_LIMITED, 0)
    for pod_set in spec["pod_sets"]:
        count = admitted.get(pod_set["name"], pod_set["count"])
        for resource in _LIMITED:
            if resource in pod_set["requests"]:
                totals[resource] += count * parse_quantity(pod_set["requests"][resource])
    memory_bytes = -(-totals["memory"] // MILLI)  # milli-bytes, rounded up
    return JobLimits(memory_bytes=memory_bytes or None, cpu_millis=totals["cpu"] or None)
