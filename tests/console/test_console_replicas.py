"""Console sessions across gateway replicas (two apps on one PostgreSQL database): a
session made on one works on the other, a sign-out on one ends it on both, and a key
revoked, rotated away or (the bootstrap key) changed ends its sessions everywhere."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import AuthSettings, DatabaseSettings, Settings
from tests.conftest import ADMIN_KEY
from tests.console.test_console_http import csrf_of, sign_in
from tests.gateway.test_workload_api import CONFIG, bearer, key_for
from tests.support.postgres import create_database

Clients = tuple[TestClient[Any], TestClient[Any]]


@pytest.fixture
async def shared(settings: Settings, postgres: str, postgres_template: str) -> Settings:
    url = await create_database(postgres, template=postgres_template)
    return replace(settings, database=DatabaseSettings(url=url))


@pytest.fixture
def replicas(shared: Settings) -> Iterator[Clients]:
    with ExitStack() as stack:
        one = stack.enter_context(TestClient(app=create_app(shared)))
        answer = one.post("/api/v1/admin/config", json=CONFIG, headers=bearer(ADMIN_KEY))
        assert answer.status_code == 201, answer.text
        other = stack.enter_context(TestClient(app=create_app(shared)))
        yield one, other


def _cookie(client: TestClient[Any]) -> dict[str, str]:
    value = client.cookies.get("ignara_console")
    assert value
    return {"Cookie": f"ignara_console={value}"}


def _page(client: TestClient[Any], path: str, cookie: dict[str, str]) -> Any:
    return client.get(path, headers=cookie, follow_redirects=False)


def _ended(client: TestClient[Any], cookie: dict[str, str], deadline: float = 5.0) -> bool:
    """Whether the session ends within ``deadline`` seconds (another replica notices a
    key's change at its config watcher's next look, about every second)."""
    until = time.monotonic() + deadline
    while time.monotonic() < until:
        answer = _page(client, "/console/workloads", cookie)
        if answer.status_code == 303:
            return answer.headers["location"].startswith("/console/login")
        time.sleep(0.2)
    return False


def test_a_session_works_on_every_replica_and_logout_on_one_ends_it_on_all(
    replicas: Clients,
) -> None:
    one, other = replicas
    assert sign_in(one, ADMIN_KEY).status_code == 303
    cookie = _cookie(one)
    dashboard = _page(other, "/console/dashboard", cookie)
    assert dashboard.status_code == 200 and "platform admin" in dashboard.text
    out = other.post(
        "/console/logout",
        data={"csrf": csrf_of(dashboard.text)},
        headers=cookie,
        follow_redirects=False,
    )
    assert out.status_code == 303
    assert _page(one, "/console/dashboard", cookie).headers["location"] == "/console/login"


def test_a_new_key_shown_on_one_replica_is_shown_once(replicas: Clients) -> None:
    one, other = replicas
    sign_in(one, ADMIN_KEY)
    cookie = _cookie(one)
    page = _page(one, "/console/tenants/alpha", cookie)
    created = one.post(
        "/console/tenants/alpha/keys",
        data={"csrf": csrf_of(page.text), "principal": "newbie", "role": "member"},
        headers=cookie,
        follow_redirects=False,
    )
    assert created.status_code == 303
    shown = _page(other, "/console/tenants/alpha", cookie)
    assert 'data-testid="new-token"' in shown.text
    assert 'data-testid="new-token"' not in _page(one, "/console/tenants/alpha", cookie).text


def test_a_key_revoked_on_one_replica_ends_its_session_on_the_other(replicas: Clients) -> None:
    one, other = replicas
    lead = key_for(one, "alpha", ["tenant-admin"])
    sign_in(other, lead)
    cookie = _cookie(other)
    assert _page(other, "/console/workloads", cookie).status_code == 200
    key_id = lead.split("_")[2]
    revoked = one.delete(f"/api/v1/admin/tenants/alpha/keys/{key_id}", headers=bearer(ADMIN_KEY))
    assert revoked.status_code == 200, revoked.text
    assert _ended(other, cookie)
    assert _page(one, "/console/dashboard", cookie).status_code == 303  # gone for all


def test_a_rotated_key_keeps_its_session_through_the_grace_only(replicas: Clients) -> None:
    one, _ = replicas
    lead = key_for(one, "alpha", ["tenant-admin"])
    key_id = lead.split("_")[2]
    sign_in(one, lead)
    cookie = _cookie(one)
    rotate = f"/api/v1/admin/tenants/alpha/keys/{key_id}/rotate"
    graced = one.post(rotate, json={"grace_seconds": 3600}, headers=bearer(ADMIN_KEY))
    assert graced.status_code == 201, graced.text
    assert _page(one, "/console/workloads", cookie).status_code == 200  # the old secret holds
    # Rotated again without grace: the secret this session signed in with is refused.
    ended = one.post(rotate, json={"grace_seconds": 0}, headers=bearer(ADMIN_KEY))
    assert ended.status_code == 201, ended.text
    assert _ended(one, cookie)


def test_a_changed_bootstrap_key_ends_its_sessions(shared: Settings, replicas: Clients) -> None:
    one, _ = replicas
    sign_in(one, ADMIN_KEY)
    cookie = _cookie(one)
    rekeyed = replace(
        shared,
        auth=AuthSettings(admin_key="another-bootstrap-key-987654321", pepper=shared.auth.pepper),
    )
    with TestClient(app=create_app(rekeyed)) as third:
        answer = _page(third, "/console/dashboard", cookie)
        assert answer.status_code == 303 and "ended" in answer.headers["location"]
