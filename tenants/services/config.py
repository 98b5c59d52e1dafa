"""Apply a declarative config (``ignara.yaml``) to the database, and read the quota
configuration back for the engine.

Applying is idempotent: objects in the file are created or updated, objects not in
it are removed, and only real changes are written and audited. A cluster queue that
still holds admitted work is never removed. Neither is a tenant with admitted or
running workloads; any other tenant left out of the file is deleted (softly: its keys
revoked, its principals disabled, its pending workloads cancelled; its history stays)
and comes back, with none of its old keys, if a later file names it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import msgspec
from sqlalchemy import func, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from quota.config import ClusterQueueDoc, CohortDoc, QuotaDocument, to_quota_config
from quota.model import QuotaConfig
from quota.periods import BudgetPeriod
from tenants.config_file import BackendDoc, IgnaraConfig, InferenceDoc, ModelDoc, PricesDoc
from tenants.errors import ConflictError
from tenants.models import (
    AuditEntry,
    ClusterQueueRow,
    CohortRow,
    FlavorRow,
    ModelRow,
    Principal,
    Tenant,
    WorkloadRow,
)
from tenants.models._base import utcnow
from tenants.services.charges import Prices
from tenants.services.tenants import HOLDING_STATES, close_queues, delete_tenant, live_tenants

__all__ = [
    "BACKEND_VERSIONS",
    "HOLDING_STATES",
    "ApplyReport",
    "BackendConfig",
    "apply_config",
    "count_cluster_queues",
    "export_config",
    "is_unconfigured",
    "load_backend_config",
    "load_inference_settings",
    "load_models",
    "load_prices",
    "load_quota_config",
    "serialize_config_changes",
]


@dataclass
class ApplyReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted)

    def summary(self) -> str:
        if not self.changed:
            return "no changes"
        parts = [
            f"{verb} {', '.join(names)}"
            for verb, names in (
                ("created", self.created),
                ("updated", self.updated),
                ("deleted", self.deleted),
            )
            if names
        ]
        return "; ".join(parts)


async def apply_config(session: AsyncSession, config: IgnaraConfig, actor: str) -> ApplyReport:
    """Make the database say what ``config`` says, in the caller's transaction."""
    await serialize_config_changes(session)
    report = ApplyReport()
    await _refuse_removing_busy_queues(session, {q.name for q in config.cluster_queues})
    # Where a flavor runs is a global setting, but a change of it is the flavor's.
    setting = await session.get(CohortRow, _SETTINGS_ROW)
    ran_on: dict[str, str] = (setting.spec.get("flavor_backends") or {}) if setting else {}
    runs_on = config.flavor_backends
    await _sync(
        session,
        FlavorRow,
        "flavor",
        {
            name: ({"backend": runs_on[name]} if name in runs_on else {}, i)
            for i, name in enumerate(config.flavor_names)
        },
        actor,
        report,
        moved={n for n in config.flavor_names if ran_on.get(n) != runs_on.get(n)},
    )
    await _sync(session, CohortRow, "cohort", _specs(config.cohorts), actor, report)
    await _sync(
        session, ClusterQueueRow, "cluster_queue", _specs(config.cluster_queues), actor, report
    )
    await _sync(session, ModelRow, "model", _specs(config.models), actor, report)
    await _sync_setting(session, _settings_spec(config), actor, report)
    await _sync_tenants(session, config, actor, report)
    return report


# Any number, the same in every gateway: the key of the advisory lock config changes take.
_CONFIG_LOCK = 0x16A7A_C0F6


async def serialize_config_changes(session: AsyncSession) -> None:
    """Config changes (an apply, one object's) one at a time across gateways, until the
    caller's transaction ends: a change reads the stored config, checks the version its
    caller read, and writes, with no other change in between. (SQLite serializes writers
    by itself.)"""
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        await session.exec(select(func.pg_advisory_xact_lock(_CONFIG_LOCK)))


async def load_models(session: AsyncSession) -> list[ModelDoc]:
    """The model registry as stored, in the configured order."""
    rows = (await session.exec(select(ModelRow).order_by(col(ModelRow.position)))).all()
    return [msgspec.convert(row.spec, ModelDoc) for row in rows]


async def load_inference_settings(session: AsyncSession) -> InferenceDoc:
    setting = await session.get(CohortRow, _SETTINGS_ROW)
    raw = setting.spec.get("inference") if setting is not None else None
    return msgspec.convert(raw or {}, InferenceDoc)


async def load_prices(session: AsyncSession) -> Prices:
    """The configured prices (none: reports give amounts only)."""
    setting = await session.get(CohortRow, _SETTINGS_ROW)
    raw = setting.spec.get("prices") if setting is not None else None
    if not raw:
        return Prices()
    doc = msgspec.convert(raw, PricesDoc)
    rates = {
        (flavor, resource): Decimal(str(price))
        for flavor, prices in doc.flavors.items()
        for resource, price in prices.items()
    }
    return Prices(doc.currency, rates)


@dataclass(frozen=True)
class BackendConfig:
    """The declared backends (the local one is implicit) and flavor -> backend."""

    backends: tuple[BackendDoc, ...] = ()
    flavor_backends: dict[str, str] = field(default_factory=dict)


async def load_backend_config(session: AsyncSession) -> BackendConfig:
    setting = await session.get(CohortRow, _SETTINGS_ROW)
    spec = setting.spec if setting is not None else {}
    backends = msgspec.convert(spec.get("backends") or [], list[BackendDoc])
    return BackendConfig(tuple(backends), dict(spec.get("flavor_backends") or {}))


async def load_quota_config(session: AsyncSession) -> QuotaConfig:
    """The quota configuration as stored, in the order it was configured."""
    flavors = (await session.exec(select(FlavorRow).order_by(col(FlavorRow.position)))).all()
    cohorts = (await session.exec(select(CohortRow).order_by(col(CohortRow.position)))).all()
    queues = (
        await session.exec(select(ClusterQueueRow).order_by(col(ClusterQueueRow.position)))
    ).all()
    setting = await session.get(CohortRow, _SETTINGS_ROW)
    document = QuotaDocument(
        flavors=[f.name for f in flavors],
        cohorts=[msgspec.convert(c.spec, CohortDoc) for c in cohorts if c.name != _SETTINGS_ROW],
        cluster_queues=[msgspec.convert(q.spec, ClusterQueueDoc) for q in queues],
        fair_sharing=bool(setting and setting.spec.get("fair_sharing")),
        budget_period=BudgetPeriod((setting.spec if setting else {}).get("budget_period", "month")),
    )
    return to_quota_config(document)


async def count_cluster_queues(session: AsyncSession) -> int:
    """How many cluster queues are configured."""
    return (await session.exec(select(func.count()).select_from(ClusterQueueRow))).one()


async def is_unconfigured(session: AsyncSession) -> bool:
    """Whether nothing was ever configured: no flavor, cohort, queue, tenant or model
    (the row of global settings alone does not count)."""
    for table in (FlavorRow, ClusterQueueRow, Tenant, ModelRow):
        if (await session.exec(select(table).limit(1))).first() is not None:
            return False
    cohorts = await session.exec(select(CohortRow.name).where(CohortRow.name != _SETTINGS_ROW))
    return cohorts.first() is None


async def export_config(session: AsyncSession) -> dict[str, Any]:
    """The configuration as stored, in the shape of ``ignara.yaml`` (applying it
    back changes nothing)."""
    flavors = (await session.exec(select(FlavorRow).order_by(col(FlavorRow.position)))).all()
    cohorts = (await session.exec(select(CohortRow).order_by(col(CohortRow.position)))).all()
    queues = (
        await session.exec(select(ClusterQueueRow).order_by(col(ClusterQueueRow.position)))
    ).all()
    tenants = await live_tenants(session)
    models = (await session.exec(select(ModelRow).order_by(col(ModelRow.position)))).all()
    setting = await session.get(CohortRow, _SETTINGS_ROW)
    spec = setting.spec if setting is not None else {}
    by_flavor: dict[str, str] = spec.get("flavor_backends") or {}
    return {
        "flavors": [
            {"name": f.name, "backend": by_flavor[f.name]} if f.name in by_flavor else f.name
            for f in flavors
        ],
        "cohorts": [c.spec for c in cohorts if c.name != _SETTINGS_ROW],
        "cluster_queues": [q.spec for q in queues],
        "fair_sharing": bool(setting and setting.spec.get("fair_sharing")),
        **(
            {"budget_period": spec["budget_period"]}
            if spec.get("budget_period", "month") != "month"
            else {}
        ),
        "tenants": [
            {"name": t.name, **{k: v for k, v in _tenant_spec(t).items() if v not in (None, {})}}
            for t in tenants
        ],
        "models": [m.spec for m in models],
        "inference": spec.get("inference") or {},
        "backends": spec.get("backends") or [],
        **({"prices": spec["prices"]} if spec.get("prices") else {}),
    }


# Global quota settings ride in a reserved cohort row ("." is not a valid name).
_SETTINGS_ROW = "."
# Backends ride in it too, so their versions (name -> version) are kept in it.
BACKEND_VERSIONS = "backend_versions"
# The settings row's keys that the global settings object (its version) stands for;
# backends and where each flavor runs have versions of their own (the backend's, the
# flavor's), so changing them does not move it.
_VERSIONED_SETTINGS = frozenset({"fair_sharing", "budget_period", "prices", "inference"})


def _specs(docs: Sequence[msgspec.Struct]) -> dict[str, tuple[dict[str, Any], int]]:
    return {
        doc.name: (msgspec.to_builtins(doc), i)  # type: ignore[attr-defined]
        for i, doc in enumerate(docs)
    }


async def _sync(
    session: AsyncSession,
    table: type[FlavorRow] | type[CohortRow] | type[ClusterQueueRow] | type[ModelRow],
    kind: str,
    wanted: dict[str, tuple[dict[str, Any], int]],
    actor: str,
    report: ApplyReport,
    moved: frozenset[str] | set[str] = frozenset(),
) -> None:
    """``moved``: flavors whose backend changed (their rows hold no spec to compare)."""
    rows: Sequence[Any] = (await session.exec(select(table))).all()
    existing = {row.name: row for row in rows}
    existing.pop(_SETTINGS_ROW, None)
    for name, (spec, position) in wanted.items():
        row = existing.pop(name, None)
        if row is None:
            session.add(_new_row(table, name, spec, position))
            _audit(session, actor, "create", kind, name, spec)
            report.created.append(f"{kind} {name}")
        elif (
            name in moved or _spec_of(row) != _stored_spec(table, spec) or row.position != position
        ):
            if isinstance(row, CohortRow | ClusterQueueRow | ModelRow):
                row.spec = spec
            row.position = position
            row.updated_at = utcnow()
            row.version += 1
            session.add(row)
            _audit(session, actor, "update", kind, name, spec)
            report.updated.append(f"{kind} {name}")
    for name, row in existing.items():
        await session.delete(row)
        _audit(session, actor, "delete", kind, name, {})
        report.deleted.append(f"{kind} {name}")


def _new_row(
    table: type[FlavorRow] | type[CohortRow] | type[ClusterQueueRow] | type[ModelRow],
    name: str,
    spec: dict[str, Any],
    position: int,
) -> FlavorRow | CohortRow | ClusterQueueRow | ModelRow:
    if table is FlavorRow:
        return FlavorRow(name=name, position=position)
    return table(name=name, spec=spec, position=position)  # type: ignore[call-arg]


def _stored_spec(table: type[Any], spec: dict[str, Any]) -> dict[str, Any]:
    """What a row of ``table`` keeps of ``spec`` (a flavor row: nothing)."""
    return {} if table is FlavorRow else spec


def _spec_of(row: FlavorRow | CohortRow | ClusterQueueRow | ModelRow) -> dict[str, Any]:
    return {} if isinstance(row, FlavorRow) else dict(row.spec)


def _settings_spec(config: IgnaraConfig) -> dict[str, Any]:
    # Backends and which flavor goes where are global settings: no table of their own.
    return {
        "fair_sharing": config.fair_sharing,
        "budget_period": config.budget_period.value,
        "inference": msgspec.to_builtins(config.inference),
        "backends": msgspec.to_builtins(config.backends),
        "flavor_backends": config.flavor_backends,
        "prices": msgspec.to_builtins(config.prices) if config.prices is not None else None,
    }


async def _sync_setting(
    session: AsyncSession, spec: dict[str, Any], actor: str, report: ApplyReport
) -> None:
    row = await session.get(CohortRow, _SETTINGS_ROW)
    if row is None:
        versions = _backend_versions(session, actor, report, [], spec["backends"], {})
        session.add(
            CohortRow(name=_SETTINGS_ROW, spec={**spec, BACKEND_VERSIONS: versions}, position=-1)
        )
        return
    old = {key: value for key, value in row.spec.items() if key != BACKEND_VERSIONS}
    changed = sorted(key for key in spec.keys() | old.keys() if old.get(key) != spec.get(key))
    if not changed:
        return
    versions = _backend_versions(
        session, actor, report, old.get("backends") or [], spec["backends"], row.spec
    )
    row.spec = {**spec, BACKEND_VERSIONS: versions}
    if _VERSIONED_SETTINGS.intersection(changed):
        row.version += 1
    session.add(row)
    for key in changed:
        if key == "backends":
            continue  # audited per backend, above
        _audit(session, actor, "update", "setting", key, {key: spec.get(key)})
        report.updated.append(f"setting {key}")


def _backend_versions(
    session: AsyncSession,
    actor: str,
    report: ApplyReport,
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    stored: dict[str, Any],
) -> dict[str, int]:
    """Each backend's version after the change (a changed one's moves on, a new one's
    is 1), and an audit entry per backend created, changed or removed."""
    kept: dict[str, int] = dict(stored.get(BACKEND_VERSIONS) or {})
    was = {b["name"]: b for b in before}
    versions: dict[str, int] = {}
    for backend in after:
        name = backend["name"]
        if name not in was:
            versions[name] = 1
            _audit(session, actor, "create", "backend", name, backend)
            report.created.append(f"backend {name}")
        elif was[name] != backend:
            versions[name] = kept.get(name, 1) + 1
            _audit(session, actor, "update", "backend", name, backend)
            report.updated.append(f"backend {name}")
        else:
            versions[name] = kept.get(name, 1)
    for name in sorted(was.keys() - versions.keys()):
        _audit(session, actor, "delete", "backend", name, {})
        report.deleted.append(f"backend {name}")
    return versions


async def _sync_tenants(
    session: AsyncSession, config: IgnaraConfig, actor: str, report: ApplyReport
) -> None:
    existing = {t.name: t for t in (await session.exec(select(Tenant))).all()}
    for doc in config.tenants:
        limits = msgspec.to_builtins(doc.limits) if doc.limits is not None else {}
        spec: dict[str, Any] = {
            "display_name": doc.display_name,
            "queues": list(doc.queues),
            "backends": doc.backends,
            "limits": limits,
            "models": doc.models,
            "key_policy": (
                msgspec.to_builtins(doc.key_policy) if doc.key_policy is not None else {}
            ),
        }
        tenant = existing.pop(doc.name, None)
        if tenant is None:
            session.add(Tenant(name=doc.name, **spec))
            _audit(session, actor, "create", "tenant", doc.name, spec, tenant=doc.name)
            report.created.append(f"tenant {doc.name}")
        elif tenant.deleted_at is not None:
            await _restore_tenant(session, tenant, spec)
            restored = {**spec, "restored": True}
            _audit(session, actor, "create", "tenant", doc.name, restored, tenant=doc.name)
            report.created.append(f"tenant {doc.name}")
        elif _tenant_spec(tenant) != spec:
            await close_queues(session, doc.name, sorted(set(tenant.queues) - set(doc.queues)))
            for field_name, value in spec.items():
                setattr(tenant, field_name, value)
            tenant.updated_at = utcnow()
            tenant.version += 1
            session.add(tenant)
            _audit(session, actor, "update", "tenant", doc.name, spec, tenant=doc.name)
            report.updated.append(f"tenant {doc.name}")
    for name, tenant in sorted(existing.items()):
        if tenant.deleted_at is None:
            await delete_tenant(session, name, actor=actor)
            report.deleted.append(f"tenant {name}")


async def _restore_tenant(session: AsyncSession, tenant: Tenant, spec: dict[str, Any]) -> None:
    """A deleted tenant named again: live, with the new spec. Its principals may hold
    keys again; the keys it had stay revoked."""
    for field_name, value in spec.items():
        setattr(tenant, field_name, value)
    tenant.deleted_at = None
    tenant.updated_at = utcnow()
    tenant.version += 1
    session.add(tenant)
    await session.exec(
        update(Principal).where(col(Principal.tenant) == tenant.name).values(disabled_at=None)
    )


def _tenant_spec(tenant: Tenant) -> dict[str, Any]:
    return {
        "display_name": tenant.display_name,
        "queues": list(tenant.queues),
        "backends": tenant.backends,
        "limits": dict(tenant.limits),
        "models": tenant.models,
        "key_policy": dict(tenant.key_policy),
    }


async def _refuse_removing_busy_queues(session: AsyncSession, kept: set[str]) -> None:
    rows = await session.exec(
        select(WorkloadRow.queue, WorkloadRow.name).where(
            col(WorkloadRow.state).in_(HOLDING_STATES)
        )
    )
    busy: dict[str, list[str]] = {}
    for queue, name in rows.all():
        if queue not in kept:
            busy.setdefault(queue, []).append(name)
    if busy:
        queue, names = sorted(busy.items())[0]
        raise ConflictError(
            f"cluster queue {queue!r} holds admitted work ({', '.join(sorted(names)[:5])}); "
            "finish or cancel it before removing the queue"
        )


def _audit(
    session: AsyncSession,
    actor: str,
    action: str,
    kind: str,
    name: str,
    detail: dict[str, Any],
    *,
    tenant: str | None = None,
) -> None:
    session.add(
        AuditEntry(actor=actor, action=action, kind=kind, name=name, tenant=tenant, detail=detail)
    )
