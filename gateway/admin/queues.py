"""One cluster queue: its live state (``GET /api/v1/admin/queues/{name}``) and the
preview of a quota change (``POST /api/v1/admin/config/cluster-queues/{name}/preview``).

The preview takes the body an update takes and answers what the next admission pass
would do if the change were saved: which pending workloads it would admit and which
admitted ones it would preempt, by the same engine the admission loop runs, built from
a snapshot of the database with the one queue's spec replaced. Nothing is stored.
Only platform admins may ask: the answer names other tenants' workloads.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import msgspec
from litestar import Controller, Request, get, post
from litestar.di import NamedDependency
from litestar.params import HeaderParameter, JSONBody, Parameter

from gateway.admin.live import LevelOut, OldestOut, QueueOut, _board, _viewer
from gateway.admin.models import if_match_version
from gateway.admission.changes import read_marker
from gateway.admission.snapshot import Snapshot, read_snapshot
from gateway.auth import Identity
from gateway.authorization import authorize
from gateway.errors import ApiError
from gateway.openapi import errors
from gateway.services import Services
from quota import QuotaConfig
from tenants import parse_config
from tenants.config_file import NAME_PATTERN
from tenants.errors import NotFoundError, StaleVersionError
from tenants.services import export_config
from tenants.services.objects import get_object

__all__ = ["PreviewOut", "QueueController", "preview_change"]

Name = Annotated[str, Parameter(pattern=NAME_PATTERN)]
IfMatch = Annotated[
    str | None, HeaderParameter(name="If-Match", min_length=1, max_length=100, required=False)
]
SHOWN = 500
"""At most this many workloads of each list are named; the counts are whole."""


class Change(msgspec.Struct):
    id: str
    name: str
    tenant: str
    queue: str
    # False: the next pass would do it without the change too (it has not run yet).
    because_of_change: bool
    by: str | None = None  # a preemption: the workload it makes room for


class PreviewOut(msgspec.Struct):
    queue: str
    version: int  # of the queue the preview changed
    computed_at: datetime
    admitted_count: int
    preempted_count: int
    admitted: list[Change]  # pending workloads the pass would admit (up to SHOWN)
    preempted: list[Change]  # admitted workloads it would preempt (up to SHOWN)
    still_pending: int  # in the previewed queue, after the pass


class QueueController(Controller):
    path = "/api/v1/admin"
    tags = ["admin"]

    @get("/queues/{name:str}", operation_id="GetQueueState", responses=errors(403, 404))
    async def queue(
        self,
        request: Request[Identity, Any, Any],
        name: Name,
        services: NamedDependency[Services],
    ) -> QueueOut:
        """One queue's live state, as ``GET /api/v1/admin/queues`` lists it (a tenant
        admin: the queues its tenant may use only)."""
        viewer = await _viewer(services, request.user)
        summary = await _board(services).current()
        queue = summary.queues.get(name)
        visible = viewer is None or name in summary.queues_of(viewer)
        if queue is None or not visible:
            raise ApiError(404, "not_found", f"cluster queue {name!r} does not exist")
        return QueueOut(
            queue.name,
            queue.cohort,
            list(queue.tenants) if viewer is None else [viewer],
            queue.admitted,
            queue.pending,
            OldestOut.of(queue.oldest_pending),
            [LevelOut.of(level) for level in queue.levels],
        )

    @post(
        "/config/{kind:str}/{name:str}/preview",
        operation_id="PreviewClusterQueue",
        status_code=200,
        responses=errors(403, 404, 412, 422),
    )
    async def preview(
        self,
        request: Request[Identity, Any, Any],
        # Only cluster queues have a preview; the path's shape is the objects' routes'
        # (a static "cluster-queues" segment would shadow their "{kind}").
        kind: Annotated[Literal["cluster-queues"], Parameter()],
        name: Name,
        data: JSONBody[dict[str, Any]],
        services: NamedDependency[Services],
        if_match: IfMatch = None,
    ) -> PreviewOut:
        """What saving this spec (the body of ``PUT .../cluster-queues/{name}``) would
        admit and preempt at the next admission pass; nothing is stored. With
        ``If-Match``, 412 when the queue changed since that version was read."""
        await authorize(services.policy, request.user, "admin.objects.write")
        if "name" in data and data["name"] != name:
            raise ApiError(
                422, "invalid_request", "name: differs from the path's; rename is not supported"
            )
        snapshot, settled = await _snapshot(services)
        async with services.database.snapshot() as session:
            current = await get_object(session, "cluster_queue", name)
            stored = await export_config(session)
        if if_match is not None and if_match_version(if_match) != current.version:
            raise StaleVersionError(
                f"cluster_queue {name!r} is at version {current.version}, not "
                f"{if_match_version(if_match)}: someone changed it since it was read; "
                "read it again and retry",
                current.version,
            )
        changed = _replaced(stored, name, data)
        return await asyncio.to_thread(
            preview_change, snapshot, changed, name, current.version, settled=settled
        )


async def _snapshot(services: Services) -> tuple[Snapshot, bool]:
    """The admission leader's last snapshot when nothing in it has changed since (this
    process leads: no rows to read), else one read now. Either way taken as of now, so
    budgets count time up to this moment. True: the leader's, so settled (see
    :func:`preview_change`)."""
    if services.live is not None:
        kept = services.live.snapshot_as_of(await read_marker(services.database))
        if kept is not None:
            return dataclasses.replace(kept, now=datetime.now(UTC)), True
    return await read_snapshot(services.database, charged=services.charged_loader), False


def _replaced(stored: dict[str, Any], name: str, spec: dict[str, Any]) -> QuotaConfig:
    """The stored config with one queue's spec replaced, checked as a file is
    (a :class:`~quota.errors.ConfigError`, 422, names the field at fault)."""
    queues = stored["cluster_queues"]
    index = next((i for i, q in enumerate(queues) if q.get("name") == name), None)
    if index is None:
        raise NotFoundError(f"cluster_queue {name!r} does not exist")
    queues[index] = {**spec, "name": name}
    return parse_config(stored).quota_config()


def preview_change(
    snapshot: Snapshot, config: QuotaConfig, queue: str, version: int, *, settled: bool = False
) -> PreviewOut:
    """Run the engine to quiet on ``snapshot`` as it is and with ``config``; name what
    the changed pass admits and preempts, and whether the unchanged one would too.
    ``settled``: an admission pass already ran on this very snapshot and changed nothing
    (its admissions and preemptions would have moved the rows it was read from), so
    the unchanged pass admits and preempts nothing and is not run again."""
    skip = frozenset(row.id for row in snapshot.closed())
    if settled and snapshot.held is not None:
        before_admitted: Collection[str] = snapshot.held
        holding = set(before_admitted)
    else:
        before, holding = snapshot.engine(skip=skip)
        before.schedule()
        before_admitted = before.admitted
    after, _ = dataclasses.replace(snapshot, config=config).engine(skip=skip)
    after.schedule()
    by_id = snapshot.by_id
    admitted = sorted(
        (n for n in after.admitted if n not in holding), key=lambda n: by_id[n].created_at
    )
    preempted = sorted(holding - set(after.admitted), key=lambda n: by_id[n].created_at)

    def change(name: str, *, also: bool, by: str | None = None) -> Change:
        row = by_id[name]
        return Change(row.id, row.name, row.tenant, row.queue, not also, by)

    admitted_out = [change(n, also=n in before_admitted) for n in admitted[:SHOWN]]
    preempted_out = []
    for n in preempted[:SHOWN]:
        why = after.preemption(n)
        preempted_out.append(
            change(
                n,
                also=n not in before_admitted,
                by=why.preemptor if why is not None else None,
            )
        )
    still = sum(1 for w in after.pending() if w.cluster_queue == queue)
    return PreviewOut(
        queue=queue,
        version=version,
        computed_at=snapshot.now,
        admitted_count=len(admitted),
        preempted_count=len(preempted),
        admitted=admitted_out,
        preempted=preempted_out,
        still_pending=still,
    )
