"""From quota to compute: submit admitted workloads to their backend, follow them
to the end, stop what was preempted or cancelled.

Each pass:
  1. admitted -> submit the job (named ``<workload>-<attempt>``, so a retry after a
     crash is a no-op and a re-admission after preemption is a new job) -> running;
  2. running -> if the backend says it ended: succeeded / failed / cancelled, which
     releases its quota (the admission loop counts only admitted and running work);
  3. cancel requested -> stop the job; once stopped: cancelled;
  4. preempted (pending again, job still named) -> stop the job, forget it.
Every row change is guarded by the row's version, like the admission loop's.

A job carries the workload's limits (``job_limits``): memory and CPU summed over its pods
as admitted. A backend that refuses every job (the local backend when it cannot isolate
jobs) fails the workload at once ("BackendRefused") rather than running it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, or_
from sqlmodel import col, select

from gateway.backends import (
    Backend,
    BackendError,
    InvalidJobError,
    JobLimits,
    JobRefusedError,
    JobSpec,
    JobState,
)
from quota.resources import MILLI, parse_quantity
from tenants import Database
from tenants.models import WorkloadRow
from tenants.models._base import utcnow
from tenants.services.workloads import update_if_unchanged

__all__ = ["DispatchResult", "Dispatcher", "job_limits"]

_LIMITED = ("memory", "cpu")


@dataclass
class DispatchResult:
    started: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)


class Dispatcher:
    def __init__(self, database: Database, backends: Mapping[str, Backend]) -> None:
        self.database = database
        self.backends = backends

    async def run_pass(self) -> DispatchResult:
        result = DispatchResult()
        async with self.database.session() as session:
            rows = (
                await session.exec(
                    select(WorkloadRow).where(
                        or_(
                            col(WorkloadRow.state).in_(("admitted", "running")),
                            and_(
                                col(WorkloadRow.state) == "pending",
                                col(WorkloadRow.job_id).is_not(None),
                            ),
                        )
                    )
                )
            ).all()
        for row in rows:
            backend = self.backends.get(row.spec.get("backend", "local"))
            if backend is None:
                await self._end(row, "failed", "UnknownBackend", "no such backend is configured")
                result.finished.append(row.id)
            elif row.state == "pending" or row.cancel_requested:
                await self._stop(row, backend, result)
            elif row.state == "admitted":
                await self._start(row, backend, result)
            else:
                await self._follow(row, backend, result)
        return result

    async def _start(self, row: WorkloadRow, backend: Backend, result: DispatchResult) -> None:
        job_id = f"{row.id}-{row.attempt}"
        job = row.spec["job"]
        try:
            spec = JobSpec(
                job_id,
                tuple(job["command"]),
                dict(job.get("env", {})),
                int(row.spec["max_runtime_seconds"]),
                job_limits(row.spec, row.admission),
            )
        except (InvalidJobError, ValueError) as err:
            await self._end(row, "failed", "InvalidJob", str(err))
            result.finished.append(row.id)
            return
        try:
            await backend.submit(spec)
        except JobRefusedError as err:
            await self._end(row, "failed", "BackendRefused", str(err))
            result.finished.append(row.id)
            return
        except BackendError as err:
            await self._guarded(row, reason_code="BackendUnavailable", reason_message=str(err))
            return  # quota stays held; the next pass tries again
        await self._guarded(
            row,
            state="running",
            job_id=job_id,
            reason_code="Running",
            reason_message=f"running on the {backend.name} backend",
        )
        result.started.append(row.id)

    async def _follow(self, row: WorkloadRow, backend: Backend, result: DispatchResult) -> None:
        if row.job_id is None:
            return
        status = await backend.status(row.job_id)
        if status.state in (JobState.PENDING, JobState.RUNNING):
            return
        outcome = {
            JobState.SUCCEEDED: ("succeeded", "Succeeded"),
            JobState.CANCELLED: ("cancelled", "Cancelled"),
        }.get(status.state, ("failed", "Failed"))
        message = status.message or f"exited with code {status.exit_code}"
        await self._end(row, outcome[0], outcome[1], message)
        result.finished.append(row.id)

    async def _stop(self, row: WorkloadRow, backend: Backend, result: DispatchResult) -> None:
        if row.job_id is not None:
            await backend.cancel(row.job_id)
            status = await backend.status(row.job_id)
            if status.state in (JobState.PENDING, JobState.RUNNING):
                return  # stopping; look again next pass
        if row.state == "pending":  # preempted: its job is gone, it waits for quota
            await self._guarded(row, job_id=None)
        else:
            await self._end(row, "cancelled", "Cancelled", "cancelled by request")
        result.stopped.append(row.id)

    async def _end(self, row: WorkloadRow, state: str, code: str, message: str) -> None:
        await self._guarded(
            row,
            state=state,
            finished_at=utcnow(),
            reason_code=code,
            reason_message=message[:2000],
            reason_detail=None,
        )

    async def _guarded(self, row: WorkloadRow, **values: Any) -> None:
        """Write only if the row is as read; a lost race is retried next pass."""
        async with self.database.session() as session:
            await update_if_unchanged(session, row, **values)


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
