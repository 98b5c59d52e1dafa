"""One configured object at a time (a flavor, cohort, cluster queue, model, backend or
tenant, and the global settings), on the path a config apply takes.

A change reads the stored config (:func:`export_config`), changes the one object,
checks the whole document as a file is checked (:func:`parse_config`, so every quota
rule holds) and applies it (:func:`apply_config`): the same rules, the same audit
entries, the same version bumps as ``ignara apply``. Changes are serialized
(:func:`serialize_config_changes`), so the version an update names is checked against
the one it replaces.

Principals are not part of the config: they are created and changed here, audited in
the same shape.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import or_
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from quota.errors import ConfigError
from tenants.config_file import parse_config
from tenants.errors import ConflictError, NotFoundError, StaleVersionError
from tenants.models import (
    ApiKey,
    AuditEntry,
    ClusterQueueRow,
    CohortRow,
    FlavorRow,
    ModelRow,
    Principal,
    Tenant,
)
from tenants.models._base import utcnow
from tenants.services.config import (
    _SETTINGS_ROW,
    BACKEND_VERSIONS,
    ApplyReport,
    apply_config,
    export_config,
    serialize_config_changes,
)
from tenants.services.tenants import TenantRemoval, delete_tenant

__all__ = [
    "KINDS",
    "SETTINGS_FIELDS",
    "TENANT_AUDIT_KINDS",
    "AuditQuery",
    "ConfigObject",
    "PrincipalRecord",
    "create_principal",
    "delete_object",
    "delete_principal",
    "delete_tenant_object",
    "get_object",
    "get_principal",
    "list_audit",
    "list_objects",
    "list_principals",
    "model_names",
    "put_object",
    "put_settings",
    "read_settings",
    "update_principal",
]

# What a tenant admin may read of the audit log: entries about its own tenant's objects.
# Quota objects, models, backends and settings are the platform's, whichever tenant
# they serve.
TENANT_AUDIT_KINDS = frozenset({"tenant", "principal", "api_key", "workload"})

Kind = Literal["flavor", "cohort", "cluster_queue", "model", "backend", "tenant"]
# Kind -> its section of the config document.
KINDS: dict[str, str] = {
    "flavor": "flavors",
    "cohort": "cohorts",
    "cluster_queue": "cluster_queues",
    "model": "models",
    "backend": "backends",
    "tenant": "tenants",
}
_TABLES: dict[str, Any] = {
    "flavor": FlavorRow,
    "cohort": CohortRow,
    "cluster_queue": ClusterQueueRow,
    "model": ModelRow,
    "tenant": Tenant,
}
# Kinds whose config entry is their row's spec as stored (export_config adds nothing).
_AS_STORED = frozenset({"cohort", "cluster_queue", "model"})
# The global settings one object holds (backends have their own routes).
SETTINGS_FIELDS = ("fair_sharing", "budget_period", "prices", "inference")


@dataclass(frozen=True)
class ConfigObject:
    kind: str
    name: str
    version: int
    spec: dict[str, Any]


def _name_of(entry: Any) -> str:
    return entry if isinstance(entry, str) else str(entry["name"])


def _spec_of(kind: str, entry: Any) -> dict[str, Any]:
    if kind == "flavor":
        return {"name": entry} if isinstance(entry, str) else dict(entry)
    return dict(entry)


async def _versions(session: AsyncSession, kind: str) -> dict[str, int]:
    """Each object's version. Backends live in the settings row, each with its own
    version there (one from before versions were kept there: 1); the settings' version
    is the row's."""
    if kind in ("backend", "setting"):
        row = await session.get(CohortRow, _SETTINGS_ROW)
        if kind == "setting":
            return {"*": row.version if row is not None else 1}
        kept = (row.spec.get(BACKEND_VERSIONS) if row is not None else None) or {}
        return {**{str(k): int(v) for k, v in kept.items()}, "*": 1}
    table = _TABLES[kind]
    rows = await session.exec(select(table.name, table.version))
    return dict(rows.all())


def _version_of(versions: dict[str, int], name: str) -> int:
    return versions.get(name, versions.get("*", 1))


async def list_objects(
    session: AsyncSession, kind: str, *, after: str | None, limit: int
) -> tuple[list[ConfigObject], str | None]:
    """Objects of ``kind`` by name after ``after``; and the name to continue after,
    when there are more."""
    stored = await export_config(session)
    versions = await _versions(session, kind)
    entries = sorted(stored[KINDS[kind]], key=_name_of)
    page = [e for e in entries if after is None or _name_of(e) > after][: limit + 1]
    objects = [
        ConfigObject(kind, _name_of(e), _version_of(versions, _name_of(e)), _spec_of(kind, e))
        for e in page[:limit]
    ]
    return objects, (objects[-1].name if len(page) > limit else None)


async def get_object(session: AsyncSession, kind: str, name: str) -> ConfigObject:
    if kind in _AS_STORED:
        # Exported as stored: one row, not the whole config (a thousand queues).
        table = _TABLES[kind]
        row = (await session.exec(select(table).where(table.name == name))).first()
        if row is None or row.name == _SETTINGS_ROW:
            raise NotFoundError(f"{kind} {name!r} does not exist")
        return ConfigObject(kind, name, row.version, dict(row.spec))
    stored = await export_config(session)
    for entry in stored[KINDS[kind]]:
        if _name_of(entry) == name:
            versions = await _versions(session, kind)
            return ConfigObject(kind, name, _version_of(versions, name), _spec_of(kind, entry))
    raise NotFoundError(f"{kind} {name!r} does not exist")


async def model_names(session: AsyncSession) -> set[str]:
    """The configured models' names (whether a PUT creates or replaces)."""
    return set((await session.exec(select(ModelRow.name))).all())


async def put_object(
    session: AsyncSession,
    kind: str,
    name: str,
    spec: dict[str, Any],
    *,
    actor: str,
    expected: int | None,
) -> ConfigObject:
    """Create (``expected`` None: refused if it exists) or replace (``expected``: the
    version the caller read) one object, in the caller's transaction."""
    await serialize_config_changes(session)
    stored = await export_config(session)
    section: list[Any] = stored[KINDS[kind]]
    index = next((i for i, e in enumerate(section) if _name_of(e) == name), None)
    if expected is None and index is not None:
        current = _version_of(await _versions(session, kind), name)
        raise ConflictError(
            f"{kind} {name!r} already exists (version {current}); change it with PUT and If-Match"
        )
    if expected is not None:
        if index is None:
            raise NotFoundError(f"{kind} {name!r} does not exist")
        await _check_version(session, kind, name, expected)
    entry = _entry(kind, name, spec)
    if index is None:
        section.append(entry)
    else:
        section[index] = entry
    await _apply(session, stored, actor, kind, name, conflict=False)
    return await get_object(session, kind, name)


async def delete_object(
    session: AsyncSession, kind: str, name: str, *, actor: str, expected: int | None
) -> ApplyReport:
    """Remove one object; refused (``ConflictError``, naming what) while something
    depends on it. ``expected``, if given, must be its current version."""
    await serialize_config_changes(session)
    stored = await export_config(session)
    section: list[Any] = stored[KINDS[kind]]
    index = next((i for i, e in enumerate(section) if _name_of(e) == name), None)
    if index is None:
        raise NotFoundError(f"{kind} {name!r} does not exist")
    if kind == "tenant":
        removal = await delete_tenant_object(session, name, actor=actor, expected=expected)
        return ApplyReport(deleted=[f"tenant {removal.name}"])
    if expected is not None:
        await _check_version(session, kind, name, expected)
    if (reason := _dependents(stored, kind, name)) is not None:
        raise ConflictError(f"{kind} {name!r} cannot be deleted: {reason}")
    del section[index]
    return await _apply(session, stored, actor, kind, name, conflict=True)


async def delete_tenant_object(
    session: AsyncSession, name: str, *, actor: str, expected: int | None
) -> TenantRemoval:
    """Soft-delete one tenant (:func:`delete_tenant`), once ``expected``, if given, is
    its current version; serialized with config changes, so the version checked is the
    one deleted."""
    await serialize_config_changes(session)
    if expected is not None:
        current = (
            await session.exec(
                select(Tenant.version).where(
                    col(Tenant.name) == name, col(Tenant.deleted_at).is_(None)
                )
            )
        ).first()
        if current is None:
            raise NotFoundError(f"tenant {name!r} does not exist")
        if current != expected:
            raise StaleVersionError(
                f"tenant {name!r} is at version {current}, not {expected}: someone changed "
                "it since it was read; read it again and retry",
                current,
            )
    return await delete_tenant(session, name, actor=actor)


async def read_settings(session: AsyncSession) -> ConfigObject:
    stored = await export_config(session)
    versions = await _versions(session, "setting")
    spec = {key: stored.get(key) for key in SETTINGS_FIELDS}
    spec["budget_period"] = stored.get("budget_period", "month")
    return ConfigObject("setting", "settings", versions["*"], spec)


async def put_settings(
    session: AsyncSession, spec: dict[str, Any], *, actor: str, expected: int
) -> ConfigObject:
    """Replace the global settings named in ``spec`` (the others stay)."""
    await serialize_config_changes(session)
    stored = await export_config(session)
    await _check_version(session, "setting", "settings", expected)
    for key, value in spec.items():
        if value is None:
            stored.pop(key, None)
        else:
            stored[key] = value
    await _apply(session, stored, actor, "setting", "settings", conflict=False)
    return await read_settings(session)


async def _check_version(session: AsyncSession, kind: str, name: str, expected: int) -> None:
    current = _version_of(await _versions(session, kind), name)
    if current != expected:
        what = "the global settings" if kind == "setting" else f"{kind} {name!r}"
        raise StaleVersionError(
            f"{what} is at version {current}, not {expected}: someone changed it since "
            "it was read; read it again and retry",
            current,
        )


def _entry(kind: str, name: str, spec: dict[str, Any]) -> Any:
    entry = {**spec, "name": name}
    if kind == "flavor":
        if entry.get("backend", 0) is None:
            del entry["backend"]  # runs locally
        return name if entry == {"name": name} else entry
    return entry


async def _apply(
    session: AsyncSession,
    stored: dict[str, Any],
    actor: str,
    kind: str,
    name: str,
    *,
    conflict: bool,
) -> ApplyReport:
    try:
        config = parse_config(stored)
    except ConfigError as err:
        message = _about(str(err), stored, kind, name)
        # A removal the rest of the config still names conflicts with it; a new or
        # changed object that breaks a rule is invalid.
        raise (ConflictError(message) if conflict else err.__class__(message)) from None
    return await apply_config(session, config, actor=actor)


_INDEXED = re.compile(r"^(\w+)\[(\d+)\]")


def _about(message: str, stored: dict[str, Any], kind: str, name: str) -> str:
    """A config error names ``cluster_queues[3].x``: say which object that is."""
    match = _INDEXED.match(message)
    if match is None:
        return message
    section, index = match.group(1), int(match.group(2))
    entries = stored.get(section)
    if not isinstance(entries, list) or index >= len(entries):
        return message
    return f"{section}[{_name_of(entries[index])!r}]{message[match.end() :]}"


def _dependents(stored: dict[str, Any], kind: str, name: str) -> str | None:
    """What still names the object, said for a person; None when nothing does."""
    found: list[str] = []
    queues = stored["cluster_queues"]
    if kind == "flavor":
        found += [
            f"cluster queue {q['name']!r} has quota for it"
            for q in queues
            if any(
                f.get("name") == name
                for group in q.get("resource_groups", [])
                for f in group.get("flavors", [])
            )
        ]
        found += [
            f"cohort {c['name']!r} has quota for it"
            for c in stored["cohorts"]
            if any(
                f.get("name") == name
                for group in c.get("resource_groups", [])
                for f in group.get("flavors", [])
            )
        ]
        found += [
            f"model {m['name']!r} runs on it" for m in stored["models"] if m["flavor"] == name
        ]
    elif kind == "cohort":
        found += [
            f"cohort {c['name']!r} is its child"
            for c in stored["cohorts"]
            if c.get("parent") == name
        ]
        found += [
            f"cluster queue {q['name']!r} is in it" for q in queues if q.get("cohort") == name
        ]
    elif kind == "cluster_queue":
        found += [
            f"tenant {t['name']!r} submits to it"
            for t in stored["tenants"]
            if name in t.get("queues", [])
        ]
    elif kind == "model":
        found += [
            f"tenant {t['name']!r} lists it among its models"
            for t in stored["tenants"]
            if name in (t.get("models") or [])
        ]
    elif kind == "backend":
        found += [
            f"flavor {f['name']!r} runs on it"
            for f in stored["flavors"]
            if isinstance(f, dict) and f.get("backend") == name
        ]
        found += [
            f"tenant {t['name']!r} lists it among its backends"
            for t in stored["tenants"]
            if name in (t.get("backends") or [])
        ]
    return "; ".join(found[:5]) if found else None


# --- Principals ----------------------------------------------------------------------


@dataclass(frozen=True)
class PrincipalRecord:
    principal: Principal
    roles: list[str]  # of its live keys: a principal holds no roles itself
    live_keys: int


async def list_principals(
    session: AsyncSession, tenant: str, *, after: str | None, limit: int
) -> tuple[list[PrincipalRecord], str | None]:
    await _live_tenant(session, tenant)
    query = select(Principal).where(
        col(Principal.tenant) == tenant, col(Principal.disabled_at).is_(None)
    )
    if after is not None:
        query = query.where(col(Principal.name) > after)
    rows = (await session.exec(query.order_by(col(Principal.name)).limit(limit + 1))).all()
    records = [await _record(session, p) for p in rows[:limit]]
    return records, (records[-1].principal.name if len(rows) > limit else None)


async def get_principal(session: AsyncSession, tenant: str, name: str) -> PrincipalRecord:
    return await _record(session, await _principal(session, tenant, name))


async def create_principal(
    session: AsyncSession, tenant: str, name: str, kind: str, *, actor: str
) -> PrincipalRecord:
    await _live_tenant(session, tenant, lock=True)
    existing = (
        await session.exec(
            select(Principal).where(col(Principal.tenant) == tenant, col(Principal.name) == name)
        )
    ).first()
    if existing is not None and existing.disabled_at is None:
        raise ConflictError(
            f"principal {name!r} of tenant {tenant!r} already exists (version "
            f"{existing.version}); change it with PUT and If-Match"
        )
    if existing is None:
        principal = Principal(tenant=tenant, name=name, kind=kind)
    else:  # a deleted one, named again
        principal = existing
        principal.kind, principal.disabled_at = kind, None
        principal.version += 1
    session.add(principal)
    _audit(session, actor, "create", principal, {"kind": kind})
    await session.flush()
    return await _record(session, principal)


async def update_principal(
    session: AsyncSession, tenant: str, name: str, kind: str, *, actor: str, expected: int
) -> PrincipalRecord:
    principal = await _principal(session, tenant, name, lock=True)
    if principal.version != expected:
        raise StaleVersionError(
            f"principal {name!r} is at version {principal.version}, not {expected}: "
            "someone changed it since it was read; read it again and retry",
            principal.version,
        )
    if principal.kind != kind:
        principal.kind = kind
        principal.version += 1
        session.add(principal)
        _audit(session, actor, "update", principal, {"kind": kind})
        await session.flush()
    return await _record(session, principal)


async def delete_principal(
    session: AsyncSession, tenant: str, name: str, *, actor: str, expected: int | None
) -> PrincipalRecord:
    """Disable a principal (its history names it); refused while it holds live keys."""
    principal = await _principal(session, tenant, name, lock=True)
    if expected is not None and principal.version != expected:
        raise StaleVersionError(
            f"principal {name!r} is at version {principal.version}, not {expected}",
            principal.version,
        )
    record = await _record(session, principal)
    if record.live_keys:
        raise ConflictError(
            f"principal {name!r} cannot be deleted: it holds {record.live_keys} live key(s); "
            "revoke them first"
        )
    principal.disabled_at = utcnow()
    principal.version += 1
    session.add(principal)
    _audit(session, actor, "delete", principal, {})
    await session.flush()
    return record


async def _live_tenant(session: AsyncSession, tenant: str, *, lock: bool = False) -> Tenant:
    query = select(Tenant).where(col(Tenant.name) == tenant, col(Tenant.deleted_at).is_(None))
    row = (await session.exec(query.with_for_update() if lock else query)).first()
    if row is None:
        raise NotFoundError(f"tenant {tenant!r} does not exist")
    return row


async def _principal(
    session: AsyncSession, tenant: str, name: str, *, lock: bool = False
) -> Principal:
    await _live_tenant(session, tenant)
    query = select(Principal).where(
        col(Principal.tenant) == tenant,
        col(Principal.name) == name,
        col(Principal.disabled_at).is_(None),
    )
    row = (await session.exec(query.with_for_update() if lock else query)).first()
    if row is None:
        raise NotFoundError(f"principal {name!r} of tenant {tenant!r} does not exist")
    return row


async def _record(session: AsyncSession, principal: Principal) -> PrincipalRecord:
    now = utcnow()
    live = await session.exec(
        select(ApiKey.roles).where(
            col(ApiKey.principal_id) == principal.id,
            col(ApiKey.revoked_at).is_(None),
            or_(col(ApiKey.expires_at).is_(None), col(ApiKey.expires_at) > now),
        )
    )
    keys = live.all()
    roles = sorted({role for key_roles in keys for role in key_roles})
    return PrincipalRecord(principal, roles, len(keys))


def _audit(
    session: AsyncSession, actor: str, action: str, principal: Principal, detail: dict[str, Any]
) -> None:
    session.add(
        AuditEntry(
            actor=actor,
            action=action,
            kind="principal",
            name=principal.name,
            tenant=principal.tenant,
            detail=detail,
        )
    )


# --- The audit log ---------------------------------------------------------------------


@dataclass(frozen=True)
class AuditQuery:
    actor: str | None = None
    kind: str | None = None
    name: str | None = None
    action: str | None = None
    tenant: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    # Set for a tenant admin: only entries of this tenant, of TENANT_AUDIT_KINDS; the
    # filters above narrow that further, never widen it.
    within_tenant: str | None = None


async def list_audit(
    session: AsyncSession, query: AuditQuery, *, before: int | None, limit: int
) -> tuple[Sequence[AuditEntry], int | None]:
    """Entries matching ``query``, newest first, older than entry ``before``; and the
    id to continue before, when there are more."""
    statement = select(AuditEntry)
    for column, value in (
        (AuditEntry.actor, query.actor),
        (AuditEntry.kind, query.kind),
        (AuditEntry.name, query.name),
        (AuditEntry.action, query.action),
        (AuditEntry.tenant, query.tenant),
    ):
        if value is not None:
            statement = statement.where(col(column) == value)
    if query.within_tenant is not None:
        statement = statement.where(
            col(AuditEntry.tenant) == query.within_tenant,
            col(AuditEntry.kind).in_(sorted(TENANT_AUDIT_KINDS)),
        )
    if query.since is not None:
        statement = statement.where(col(AuditEntry.at) >= query.since)
    if query.until is not None:
        statement = statement.where(col(AuditEntry.at) < query.until)
    if before is not None:
        statement = statement.where(col(AuditEntry.id) < before)
    rows = (
        await session.exec(statement.order_by(col(AuditEntry.id).desc()).limit(limit + 1))
    ).all()
    page = rows[:limit]
    return page, (page[-1].id if len(rows) > limit else None)
