"""Wire types of the workload API: every field bounded, unknown fields refused."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from tenants.models import WorkloadEventRow, WorkloadRow
from tenants.services.workloads import PodSetRequest, WorkloadSubmission

__all__ = [
    "Blocking",
    "Event",
    "PodSetIn",
    "Reason",
    "WorkloadDetail",
    "WorkloadIn",
    "WorkloadList",
    "WorkloadOut",
    "WorkloadState",
]

Name = Annotated[str, Meta(pattern=r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$", max_length=63)]
ResourceName = Annotated[
    str, Meta(pattern=r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
]
Quantity = Annotated[str, Meta(max_length=64)] | Annotated[int, Meta(ge=0, le=10**15)]
Count = Annotated[int, Meta(ge=1, le=100_000)]
Arg = Annotated[str, Meta(max_length=8192)]
EnvName = Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]


class WorkloadState(StrEnum):
    PENDING = "pending"
    ADMITTED = "admitted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class _In(msgspec.Struct, forbid_unknown_fields=True):
    pass


class PodSetIn(_In):
    name: Name
    count: Count
    requests: Annotated[dict[ResourceName, Quantity], Meta(max_length=32)]
    min_count: Count | None = None


class JobIn(_In):
    command: Annotated[list[Arg], Meta(min_length=1, max_length=256)]
    env: Annotated[dict[EnvName, Annotated[str, Meta(max_length=8192)]], Meta(max_length=128)] = {}


class WorkloadIn(_In):
    name: Name
    queue: Name
    pod_sets: Annotated[list[PodSetIn], Meta(min_length=1, max_length=16)]
    max_runtime_seconds: Annotated[int, Meta(ge=1, le=30 * 86400)]
    job: JobIn
    priority: Annotated[int, Meta(ge=-1_000_000, le=1_000_000)] = 0
    # None: the backend of the flavor it is admitted on (local when the flavor names none).
    backend: Name | None = None
    # Backend-specific sections, checked by gateway.backends.sections before anything is
    # stored (a 422 naming the option); a new backend's section is a field here too.
    slurm: Annotated[dict[str, Any], Meta(max_length=32)] | None = None
    ray: Annotated[dict[str, Any], Meta(max_length=32)] | None = None
    kubernetes: Annotated[dict[str, Any], Meta(max_length=32)] | None = None

    def sections(self) -> dict[str, dict[str, Any] | None]:
        return {"slurm": self.slurm, "ray": self.ray, "kubernetes": self.kubernetes}

    def to_submission(self, options: dict[str, dict[str, Any]] | None = None) -> WorkloadSubmission:
        return WorkloadSubmission(
            name=self.name,
            queue=self.queue,
            priority=self.priority,
            pod_sets=tuple(
                PodSetRequest(
                    p.name, p.count, {r: str(v) for r, v in p.requests.items()}, p.min_count
                )
                for p in self.pod_sets
            ),
            max_runtime_seconds=self.max_runtime_seconds,
            command=tuple(self.job.command),
            env=dict(self.job.env),
            backend=self.backend,
            options=options or {},
        )


class Blocking(msgspec.Struct):
    """What refuses the request: a cluster queue or cohort, for a flavor and resource."""

    code: str
    level: str  # ClusterQueue | Cohort
    name: str
    resource: str
    flavor: str | None
    requested: str
    available: str


class Reason(msgspec.Struct):
    code: str
    message: str
    blocking: list[Blocking] = []


class WorkloadOut(msgspec.Struct):
    id: str
    name: str
    tenant: str
    queue: str
    priority: int
    state: WorkloadState
    reason: Reason | None
    admission: dict[str, Any] | None
    pod_sets: list[dict[str, Any]]
    max_runtime_seconds: int
    # The backend its job runs (or ran, or will run) on; None until that is decided (a
    # workload naming no backend goes where its admitted flavor says).
    backend: str | None
    backend_job_id: str | None  # the backend's own id for the job (e.g. Slurm's job id)
    backend_state: str | None  # the backend's own word for the job's state (e.g. PENDING)
    started_at: datetime | None  # when its current (or last) job started on the backend
    exit_code: int | None  # how that job exited: its status, or -N when signal N ended it
    cancel_requested: bool
    attempt: int
    created_at: datetime
    updated_at: datetime
    admitted_at: datetime | None
    finished_at: datetime | None
    # Pending only: when it is expected to start (an estimate: every admitted workload
    # runs to its max runtime, nothing else is submitted; None: not within 62 days, or
    # not computed yet) and when the forecast last moved it (it runs every few seconds,
    # on the leader).
    estimated_start: datetime | None = None
    estimated_at: datetime | None = None

    @classmethod
    def of(cls, row: WorkloadRow) -> WorkloadOut:
        reason = None
        if row.reason_code is not None:
            blocking = [msgspec.convert(b, Blocking) for b in row.reason_detail or []]
            reason = Reason(row.reason_code, row.reason_message or "", blocking)
        return cls(
            id=row.id,
            name=row.name,
            tenant=row.tenant,
            queue=row.queue,
            priority=row.priority,
            state=WorkloadState(row.state),
            reason=reason,
            admission=row.admission,
            pod_sets=list(row.spec["pod_sets"]),
            max_runtime_seconds=row.spec["max_runtime_seconds"],
            backend=row.backend or row.spec.get("backend"),
            backend_job_id=row.backend_job_id,
            backend_state=row.backend_state,
            started_at=row.started_at,
            exit_code=row.exit_code,
            cancel_requested=row.cancel_requested,
            attempt=row.attempt,
            created_at=row.created_at,
            updated_at=row.updated_at,
            admitted_at=row.admitted_at,
            finished_at=row.finished_at,
            estimated_start=row.estimated_start if row.state == "pending" else None,
            estimated_at=row.estimated_at if row.state == "pending" else None,
        )


class Event(msgspec.Struct):
    """One thing that happened to the workload: ``type`` is one of submitted, admitted,
    dispatched, adopted, running, preempted, requeued, lost, cancelled, finished, failed;
    ``detail`` says more (queue and flavors; backend and its job id; by whom and why;
    exit code)."""

    type: str
    at: datetime
    attempt: int
    detail: dict[str, Any]

    @classmethod
    def of(cls, row: WorkloadEventRow) -> Event:
        return cls(type=row.type, at=row.at, attempt=row.attempt, detail=dict(row.detail))


class WorkloadDetail(WorkloadOut):
    """One workload with its timeline: the last events (at most 100, oldest first) and
    how many it has in all (``event_count``)."""

    events: list[Event] = []
    event_count: int = 0

    @classmethod
    def with_events(
        cls, row: WorkloadRow, events: list[WorkloadEventRow], count: int
    ) -> WorkloadDetail:
        out = WorkloadOut.of(row)
        fields = {f: getattr(out, f) for f in WorkloadOut.__struct_fields__}
        return cls(**fields, events=[Event.of(e) for e in events], event_count=count)


class WorkloadList(msgspec.Struct):
    items: list[WorkloadOut]
    next_cursor: str | None
