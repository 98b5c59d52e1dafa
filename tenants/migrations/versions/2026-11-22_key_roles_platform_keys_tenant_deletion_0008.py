"""roles and scopes on each key, platform keys, soft-deleted tenants

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-22 16:00:00.000000

Roles move from principals onto their keys, so issuing a key never changes another.
Each existing key gets the roles it was issued with (its audited ``create`` entry),
else its principal's roles as they stand. A tenant's key that carries ``admin`` (which
used to grant platform-wide powers quietly) becomes a platform key: no tenant, roles
``["admin"]``, under a platform principal of the same name. Scopes, never enforced
before, become explicit: a key without scopes gets every scope its roles allow; a key
with scopes keeps those its roles allow (unknown names are dropped). Each key whose
powers or tenant changed is audited (actor ``migration 0008``).

The vocabulary is frozen here, as it stood at this revision: later changes to the
code's roles and scopes must not rewrite history.
"""

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ACTOR = "migration 0008"
_MEMBER = {"inference", "workloads:read", "workloads:write", "usage:read"}
_ROLE_SCOPES = {
    "member": _MEMBER,
    "tenant-admin": _MEMBER | {"keys:read", "keys:write"},
    "admin": _MEMBER | {"keys:read", "keys:write", "admin"},
}

_keys = sa.table(
    "api_keys",
    sa.column("key_id", sa.String),
    sa.column("tenant", sa.String),
    sa.column("principal_id", sa.String),
    sa.column("roles", sa.JSON),
    sa.column("scopes", sa.JSON),
)
_principals = sa.table(
    "principals",
    sa.column("id", sa.String),
    sa.column("tenant", sa.String),
    sa.column("name", sa.String),
    sa.column("kind", sa.String),
    sa.column("roles", sa.JSON),
    sa.column("created_at", sa.DateTime(timezone=True)),
)
_audit = sa.table(
    "audit_log",
    sa.column("at", sa.DateTime(timezone=True)),
    sa.column("actor", sa.String),
    sa.column("action", sa.String),
    sa.column("kind", sa.String),
    sa.column("name", sa.String),
    sa.column("tenant", sa.String),
    sa.column("detail", sa.JSON),
)


def upgrade() -> None:
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.add_column(sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("roles", sa.JSON(), nullable=False, server_default=sa.text("'[]'"))
        )
        batch_op.alter_column("tenant", existing_type=sa.String(length=63), nullable=True)
    with op.batch_alter_table("principals", schema=None) as batch_op:
        batch_op.alter_column("tenant", existing_type=sa.String(length=63), nullable=True)
        batch_op.add_column(sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))
    _move_roles_onto_keys(op.get_bind())
    with op.batch_alter_table("principals", schema=None) as batch_op:
        batch_op.drop_column("roles")
    op.create_index(
        "uq_principals_platform_name",
        "principals",
        ["name"],
        unique=True,
        sqlite_where=sa.text("tenant IS NULL"),
        postgresql_where=sa.text("tenant IS NULL"),
    )


def _move_roles_onto_keys(connection: sa.Connection) -> None:
    now = datetime.now(UTC)
    principals = {row.id: row for row in connection.execute(sa.select(_principals))}
    issued: dict[str, list[str]] = {}
    for name, detail in connection.execute(
        sa.select(_audit.c.name, _audit.c.detail).where(
            _audit.c.kind == "api_key", _audit.c.action == "create"
        )
    ):
        if isinstance(detail, dict) and isinstance(detail.get("roles"), list):
            issued[name] = [r for r in detail["roles"] if isinstance(r, str)]
    platform: dict[str, str] = {}  # name -> id of the platform principal made here
    for key in connection.execute(sa.select(_keys)).all():
        owner = principals[key.principal_id]
        before = sorted(set(owner.roles or []))
        roles = set(issued.get(key.key_id, before)) & set(_ROLE_SCOPES)
        values: dict[str, Any] = {}
        if "admin" in roles:
            roles = {"admin"}
            if owner.name not in platform:
                platform[owner.name] = uuid4().hex
                connection.execute(
                    sa.insert(_principals).values(
                        id=platform[owner.name],
                        tenant=None,
                        name=owner.name,
                        kind=owner.kind,
                        roles=[],
                        created_at=now,
                    )
                )
            values = {"tenant": None, "principal_id": platform[owner.name]}
        elif not roles:
            roles = {"member"}
        allowed = set().union(*(_ROLE_SCOPES[r] for r in roles))
        asked = {s for s in key.scopes or [] if isinstance(s, str)}
        scopes = sorted(asked & allowed if asked else allowed)
        connection.execute(
            sa.update(_keys)
            .where(_keys.c.key_id == key.key_id)
            .values(roles=sorted(roles), scopes=scopes, **values)
        )
        if sorted(roles) != before or values:
            connection.execute(
                sa.insert(_audit).values(
                    at=now,
                    actor=ACTOR,
                    action="migrate",
                    kind="api_key",
                    name=key.key_id,
                    tenant=key.tenant,
                    detail={
                        "principal": owner.name,
                        "roles_before": before,
                        "roles": sorted(roles),
                        "scopes": scopes,
                        "platform_key": bool(values),
                    },
                )
            )


def downgrade() -> None:
    connection = op.get_bind()
    platform_keys = connection.execute(
        sa.select(sa.func.count()).select_from(_keys).where(_keys.c.tenant.is_(None))
    ).scalar_one()
    if platform_keys:
        raise RuntimeError(
            f"{platform_keys} platform keys exist, which revision 0007 cannot hold: "
            "delete them (and their principals) before downgrading"
        )
    op.drop_index("uq_principals_platform_name", table_name="principals")
    with op.batch_alter_table("principals", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("roles", sa.JSON(), nullable=False, server_default=sa.text("'[]'"))
        )
    # A principal gets the union of its keys' roles: what 0007 would have shown.
    roles: dict[str, set[str]] = {}
    for principal_id, key_roles in connection.execute(
        sa.select(_keys.c.principal_id, _keys.c.roles)
    ):
        roles.setdefault(principal_id, set()).update(key_roles or [])
    for principal_id, held in roles.items():
        connection.execute(
            sa.update(_principals)
            .where(_principals.c.id == principal_id)
            .values(roles=sorted(held))
        )
    connection.execute(sa.delete(_principals).where(_principals.c.tenant.is_(None)))
    with op.batch_alter_table("principals", schema=None) as batch_op:
        batch_op.drop_column("disabled_at")
        batch_op.alter_column("tenant", existing_type=sa.String(length=63), nullable=False)
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.alter_column("tenant", existing_type=sa.String(length=63), nullable=False)
        batch_op.drop_column("roles")
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.drop_column("deleted_at")
