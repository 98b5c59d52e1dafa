"""Keys in the console: rotation (the new token shown once, the old secret working for
the grace chosen, or not at all), and idle keys flagged with why."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import Settings
from tenants import Database
from tenants.models import ApiKey
from tenants.models._base import utcnow
from tests.conftest import ADMIN_KEY
from tests.console.test_console_http import csrf_of, sign_in
from tests.gateway.test_workload_api import CONFIG, bearer, key_for


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient[Any]]:
    with TestClient(app=create_app(settings)) as client:
        answer = client.post("/api/v1/admin/config", json=CONFIG, headers=bearer(ADMIN_KEY))
        assert answer.status_code == 201, answer.text
        yield client


def new_token(page: str) -> str:
    match = re.search(r'data-testid="new-token">([^<]+)<', page)
    assert match is not None, page
    return match.group(1)


@pytest.mark.parametrize(("grace", "old_works"), [("3600", True), ("0", False)])
def test_a_rotated_key_shows_its_new_token_once(
    client: TestClient[Any], grace: str, old_works: bool
) -> None:
    old = key_for(client, "alpha")
    key_id = old.split("_")[2]
    sign_in(client, ADMIN_KEY)
    csrf = csrf_of(client.get("/console/tenants/alpha").text)
    rotated = client.post(
        f"/console/tenants/alpha/keys/{key_id}/rotate",
        data={"csrf": csrf, "grace_seconds": grace},
    )
    assert rotated.status_code == 200, rotated.text
    token = new_token(rotated.text)
    assert token != old and token.split("_")[2] == key_id
    assert client.get("/api/v1/workloads", headers=bearer(token)).status_code == 200
    status = client.get("/api/v1/workloads", headers=bearer(old)).status_code
    assert status == (200 if old_works else 401)
    assert token not in client.get("/console/tenants/alpha").text


def test_rotation_needs_the_csrf_token_and_a_whole_grace(client: TestClient[Any]) -> None:
    old = key_for(client, "alpha")
    key_id = old.split("_")[2]
    sign_in(client, ADMIN_KEY)
    csrf = csrf_of(client.get("/console/tenants/alpha").text)
    path = f"/console/tenants/alpha/keys/{key_id}/rotate"
    assert client.post(path, data={"grace_seconds": "0"}).status_code == 403
    assert client.post(path, data={"csrf": csrf, "grace_seconds": "-1"}).status_code == 400
    assert client.post(path, data={"csrf": csrf, "grace_seconds": "99999999"}).status_code == 400
    assert client.get("/api/v1/workloads", headers=bearer(old)).status_code == 200


def test_an_idle_key_is_flagged_with_why(client: TestClient[Any], settings: Settings) -> None:
    idle = key_for(client, "alpha").split("_")[2]
    fresh = key_for(client, "alpha")

    async def age() -> None:
        database = Database(settings.database.url)
        try:
            async with database.session() as session:
                key = await session.get(ApiKey, idle)
                assert key is not None
                key.created_at = utcnow() - timedelta(days=45)
                key.last_used_at = None
                session.add(key)
        finally:
            await database.dispose()

    asyncio.run(age())
    assert client.get("/api/v1/workloads", headers=bearer(fresh)).status_code == 200
    sign_in(client, ADMIN_KEY)
    page = client.get("/console/tenants/alpha").text
    rows = {
        key_id: row
        for row in re.findall(r"<tr>(.*?)</tr>", page)
        for key_id in re.findall(r"<td><code>([0-9a-f]+)</code>", row)
    }
    assert 'data-testid="flag-idle"' in rows[idle] and "45 days" in rows[idle]
    assert "flag-" not in rows[fresh.split("_")[2]]
