"""`ignara keys`: keys made in the database with the server's pepper, the token alone
on stdout; a platform admin key made so administers a gateway on the same database;
and the gateway says at start when nobody could administer it."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from litestar.testing import TestClient
from sqlmodel import col, select

from gateway.app import create_app
from gateway.cli import main
from gateway.services import Services
from gateway.settings import Settings
from tenants.models import AuditEntry
from tests.support.gateways import LOADED_MACHINE_ENV

CONFIG = {"tenants": [{"name": "alpha"}]}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """What a server started here would read: no admin key, the pepper in a file."""
    return {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'ignara.db'}",
        "IGNARA_KEY_PEPPER": "",
        "IGNARA_KEY_PEPPER_FILE": str(tmp_path / "pepper"),
        "IGNARA_ADMIN_KEY": "",
        "IGNARA_LOCAL_BACKEND_ROOT": str(tmp_path / "jobs"),
        **LOADED_MACHINE_ENV,
    }


def ignara(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def status_soon(client: TestClient[Any], token: str, path: str, status: int) -> int:
    """The status of ``path`` once it is ``status`` (bounded wait)."""
    deadline = time.monotonic() + 10
    while True:
        got = client.get(path, headers=bearer(token)).status_code
        if got == status or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_keys_from_the_cli_work_on_a_gateway_on_the_same_database(
    env: dict[str, str], tmp_path: Path
) -> None:
    made = ignara(env, "keys", "create", "--admin", "--principal", "alice")
    assert made.exit_code == 0, made.output
    token = made.stdout.strip()
    assert token.startswith("ign_live_") and "\n" not in token  # the token alone
    assert "of the platform for alice: roles admin" in made.stderr and token not in made.stderr
    assert Path(env["IGNARA_KEY_PEPPER_FILE"]).exists()  # made as the server would make it
    config = tmp_path / "ignara.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    assert ignara(env, "apply", str(config)).exit_code == 0
    reader = ignara(
        env,
        "keys",
        "create",
        "--tenant",
        "alpha",
        "--principal",
        "dash",
        "--scope",
        "usage:read",
        "--expires-in",
        "30d",
    )
    assert reader.exit_code == 0, reader.output
    with TestClient(app=create_app(Settings.from_env(env))) as client:
        assert client.get("/api/v1/admin/tenants", headers=bearer(token)).status_code == 200
        usage = reader.stdout.strip()
        assert client.get("/api/v1/usage", headers=bearer(usage)).status_code == 200
        assert client.get("/api/v1/workloads", headers=bearer(usage)).status_code == 403
        listed = ignara(env, "keys", "list", "--tenant", "alpha")
        key_id, principal, roles, scopes, *_ = listed.stdout.strip().split("\t")
        assert (principal, roles, scopes) == ("dash", "member", "usage:read")
        assert ignara(env, "keys", "list", "--admin").stdout.count("\talice\tadmin\t") == 1
        revoked = ignara(env, "keys", "revoke", key_id)
        assert revoked.exit_code == 0 and "revoked key" in revoked.stderr
        # The running gateway had the key cached; it notices the revocation.
        assert status_soon(client, usage, "/api/v1/usage", 401) == 401
    asyncio.run(_assert_audited(env))


async def _assert_audited(env: dict[str, str]) -> None:
    from tenants import Database

    database = Database(env["DATABASE_URL"])
    try:
        async with database.session() as session:
            actions = (
                await session.exec(
                    select(AuditEntry.action).where(col(AuditEntry.actor) == "ignara keys (cli)")
                )
            ).all()
    finally:
        await database.dispose()
    assert sorted(actions) == ["create", "create", "revoke"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["create", "--principal", "x"], "exactly one of --tenant TENANT or --admin"),
        (["create", "--admin", "--tenant", "alpha", "--principal", "x"], "exactly one of"),
        (["create", "--admin", "--role", "member", "--principal", "x"], "--role is for tenant"),
        (["create", "--tenant", "nope", "--principal", "x"], "tenant 'nope' does not exist"),
        (["create", "--tenant", "alpha", "--principal", "Bad Name"], "--principal"),
        (["create", "--tenant", "alpha", "--principal", "x", "--role", "admin"], "--role"),
        (
            ["create", "--tenant", "alpha", "--principal", "x", "--scope", "admin"],
            "do not allow scope 'admin'",
        ),
        (["create", "--tenant", "alpha", "--principal", "x", "--expires-in", "5s"], "60 seconds"),
        (["create", "--tenant", "alpha", "--principal", "x", "--expires-in", "soon"], "duration"),
        (["revoke", "0123456789ab"], "not found"),
        (["list"], "exactly one of"),
    ],
)
def test_the_cli_refuses_with_a_message_and_no_token(
    env: dict[str, str], tmp_path: Path, args: list[str], message: str
) -> None:
    config = tmp_path / "ignara.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    assert ignara(env, "apply", str(config)).exit_code == 0
    result = ignara(env, "keys", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and result.stdout == ""
    assert "Traceback" not in result.output


async def test_a_gateway_without_any_admin_says_how_to_make_one(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    import dataclasses

    bare = dataclasses.replace(settings, auth=dataclasses.replace(settings.auth, admin_key=None))
    services = Services.build(bare)
    await services.database.migrate()
    try:
        with caplog.at_level(logging.WARNING, logger="gateway.services"):
            await services.warn_without_admin()
            assert "ignara keys create --admin --principal" in caplog.text
            caplog.clear()
            await Services.build(settings).warn_without_admin()  # IGNARA_ADMIN_KEY is set
            assert caplog.text == ""
            async with services.database.session() as session:
                from tenants.services.api_keys import add_api_key

                await add_api_key(
                    session,
                    tenant=None,
                    principal="ops",
                    roles=["admin"],
                    scopes=["admin"],
                    key_id="0123456789ab",
                    secret_hash="0" * 64,
                    actor="test",
                )
            await services.warn_without_admin()
            assert caplog.text == ""
    finally:
        await services.database.dispose()


def test_the_cli_rotates_a_key_with_a_grace_period(env: dict[str, str], tmp_path: Path) -> None:
    """create, list, rotate and revoke, all four against the database a gateway serves."""
    config = tmp_path / "ignara.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    assert ignara(env, "apply", str(config)).exit_code == 0
    made = ignara(env, "keys", "create", "--tenant", "alpha", "--principal", "ci")
    assert made.exit_code == 0, made.output
    old = made.stdout.strip()
    key_id = old.split("_")[2]
    with TestClient(app=create_app(Settings.from_env(env))) as client:
        assert client.get("/api/v1/usage", headers=bearer(old)).status_code == 200
        rotated = ignara(env, "keys", "rotate", key_id, "--grace", "1h")
        assert rotated.exit_code == 0, rotated.output
        new = rotated.stdout.strip()
        assert new.startswith(f"ign_live_{key_id}_") and new != old and "\n" not in new
        assert "the old token works until" in rotated.stderr and new not in rotated.stderr
        assert status_soon(client, new, "/api/v1/usage", 200) == 200
        assert client.get("/api/v1/usage", headers=bearer(old)).status_code == 200  # grace
        again = ignara(env, "keys", "rotate", key_id, "--grace", "0")
        assert again.exit_code == 0, again.output
        newest = again.stdout.strip()
        assert status_soon(client, old, "/api/v1/usage", 401) == 401
        assert status_soon(client, new, "/api/v1/usage", 401) == 401
        assert client.get("/api/v1/usage", headers=bearer(newest)).status_code == 200
        listed = ignara(env, "keys", "list", "--tenant", "alpha").stdout
        assert listed.count(key_id) == 1 and newest not in listed
        *_, last_used, calls, tokens, flags = listed.strip().split("\t")
        assert last_used != "-" and (calls, tokens, flags) == ("0", "0", "-")
        assert ignara(env, "keys", "revoke", key_id).exit_code == 0
        refused = ignara(env, "keys", "rotate", key_id)
        assert refused.exit_code == 2 and "is revoked" in refused.stderr
    for bad in ("8d", "soon", "-1h"):
        assert ignara(env, "keys", "rotate", key_id, "--grace", bad).exit_code == 2
    assert ignara(env, "keys", "rotate", "f" * 12).exit_code == 2
