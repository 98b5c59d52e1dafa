"""The console over HTTP, without a browser: sign-in and who may, the session cookie,
CSRF on every change, the security headers, a tenant admin's walls, and the OpenAPI
page's assets served by the gateway itself."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.console import CSP
from gateway.settings import Settings
from tests.conftest import ADMIN_KEY
from tests.gateway.test_workload_api import CONFIG, bearer, key_for


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient[Any]]:
    with TestClient(app=create_app(settings)) as client:
        answer = client.post("/api/v1/admin/config", json=CONFIG, headers=bearer(ADMIN_KEY))
        assert answer.status_code == 201, answer.text
        yield client


def live_dashboard(client: TestClient[Any], queue: str, wait: float = 10.0) -> Any:
    """The dashboard once it shows ``queue``: its queues are the admission leader's
    live state, which takes in a config change at its next round (half a second)."""
    deadline = time.monotonic() + wait
    while True:
        page = client.get("/console/dashboard")
        if f"/console/queues/{queue}" in page.text or time.monotonic() > deadline:
            return page
        time.sleep(0.1)


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match is not None, page
    return match.group(1)


def sign_in(client: TestClient[Any], key: str) -> Any:
    form = client.get("/console/login")
    return client.post(
        "/console/login",
        data={"csrf": csrf_of(form.text), "key": key},
        follow_redirects=False,
    )


def test_the_admin_signs_in_with_a_strict_cookie_and_signs_out(client: TestClient[Any]) -> None:
    assert client.get("/console", follow_redirects=False).headers["location"] == "/console/login"
    answer = sign_in(client, ADMIN_KEY)
    assert answer.status_code == 303 and answer.headers["location"] == "/console/dashboard"
    cookie = answer.headers["set-cookie"]
    assert (
        "HttpOnly" in cookie and "samesite=strict" in cookie.lower() and "Path=/console" in cookie
    )
    assert ADMIN_KEY not in cookie  # the key stays on the server
    dashboard = live_dashboard(client, "team-a")
    assert dashboard.status_code == 200
    assert "platform admin" in dashboard.text and "research-vision" not in ADMIN_KEY
    assert 'data-testid="quotas"' in dashboard.text and "team-a" in dashboard.text
    out = client.post(
        "/console/logout", data={"csrf": csrf_of(dashboard.text)}, follow_redirects=False
    )
    assert out.status_code == 303 and out.headers["location"] == "/console/login"
    after = client.get("/console/dashboard", follow_redirects=False)
    assert after.headers["location"] == "/console/login"


def test_the_session_id_changes_at_sign_in(client: TestClient[Any]) -> None:
    client.get("/console/login")
    before = client.cookies.get("ignara_console")
    sign_in(client, ADMIN_KEY)
    assert client.cookies.get("ignara_console") not in (None, before)


def test_bad_keys_and_members_are_refused(client: TestClient[Any]) -> None:
    wrong = sign_in(client, "ign_live_000000000000_" + "A" * 43)
    assert wrong.status_code == 401 and 'data-testid="login-error"' in wrong.text
    member = sign_in(client, key_for(client, "alpha"))
    assert member.status_code == 403 and "member" in member.text
    assert client.get("/console/dashboard", follow_redirects=False).status_code == 303


def test_every_change_needs_the_csrf_token(client: TestClient[Any]) -> None:
    page = client.get("/console/login")
    # sign-in itself: without the token, nothing is tried
    refused = client.post("/console/login", data={"key": ADMIN_KEY}, follow_redirects=False)
    assert refused.status_code == 403 and 'data-testid="csrf-refused"' in refused.text
    sign_in(client, ADMIN_KEY)
    keys_before = client.get("/api/v1/admin/tenants/alpha/keys", headers=bearer(ADMIN_KEY)).json()
    for path, data in [
        ("/console/tenants/alpha/keys", {"principal": "sneaky", "role": "member"}),
        ("/console/logout", {}),
        ("/console/workloads/" + "0" * 32 + "/cancel", {}),
        ("/console/tenants/alpha/keys/abc/revoke", {}),
    ]:
        for token in (None, csrf_of(page.text), "x" * 43):  # none, the old session's, a guess
            body = data if token is None else {**data, "csrf": token}
            answer = client.post(path, data=body, follow_redirects=False)
            assert answer.status_code == 403, (path, token, answer.text)
    keys_after = client.get("/api/v1/admin/tenants/alpha/keys", headers=bearer(ADMIN_KEY)).json()
    assert keys_after == keys_before
    assert client.get("/console/dashboard").status_code == 200  # still signed in


def test_the_csrf_header_serves_scripts_too(client: TestClient[Any]) -> None:
    sign_in(client, ADMIN_KEY)
    csrf = csrf_of(client.get("/console/tenants/alpha").text)
    created = client.post(
        "/console/tenants/alpha/keys",
        data={"principal": "scripted", "role": "member"},
        headers={"X-CSRF-Token": csrf},
    )
    assert created.status_code == 200 and 'data-testid="new-token"' in created.text


def test_every_console_answer_has_a_strict_csp(client: TestClient[Any]) -> None:
    sign_in(client, ADMIN_KEY)
    for path in ("/console/login", "/console/dashboard", "/console/static/console.css"):
        answer = client.get(path)
        assert answer.headers["content-security-policy"] == CSP, path
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["x-content-type-options"] == "nosniff"
    assert "default-src 'self'" in CSP and "script-src 'self';" in CSP
    assert "unsafe-inline" not in CSP
    refused = client.post("/console/logout", follow_redirects=False)
    assert refused.headers["content-security-policy"] == CSP
    page = client.get("/console/dashboard").text
    assert "<script>" not in page and " style=" not in page and " on" + "click" not in page


def test_a_key_shown_once_then_revoked(client: TestClient[Any]) -> None:
    sign_in(client, ADMIN_KEY)
    csrf = csrf_of(client.get("/console/tenants/alpha").text)
    shown = client.post(
        "/console/tenants/alpha/keys", data={"csrf": csrf, "principal": "ci", "role": "member"}
    )
    token = re.search(r'data-testid="new-token">([^<]+)<', shown.text)
    assert token is not None
    assert client.get("/api/v1/workloads", headers=bearer(token.group(1))).status_code == 200
    again = client.get("/console/tenants/alpha")
    assert token.group(1) not in again.text  # once only
    key_id = token.group(1).split("_")[2]
    revoked = client.post(f"/console/tenants/alpha/keys/{key_id}/revoke", data={"csrf": csrf})
    assert revoked.status_code == 200 and "revoked" in revoked.text
    assert client.get("/api/v1/workloads", headers=bearer(token.group(1))).status_code == 401


def test_a_tenant_admin_sees_only_its_own_tenant(client: TestClient[Any]) -> None:
    lead = key_for(client, "alpha", ["tenant-admin"])
    assert sign_in(client, lead).status_code == 303
    assert client.get("/console/tenants", follow_redirects=False).headers["location"] == (
        "/console/tenants/alpha"
    )
    own = client.get("/console/tenants/alpha")
    assert own.status_code == 200 and 'data-testid="keys"' in own.text
    other = client.get("/console/tenants/beta")
    assert 'data-testid="api-error"' in other.text and 'data-testid="keys"' not in other.text
    role_select = own.text.split('id="role"')[1].split("</select>")[0]
    options = re.findall(r'<option value="([^"]+)"', role_select)
    assert options == ["member"]  # a tenant admin issues member keys only
    usage = client.get("/console/usage", params={"group_by": "tenant"})
    assert "beta" not in usage.text.split('data-testid="usage"')[1]


def test_a_revoked_key_ends_its_session(client: TestClient[Any]) -> None:
    lead = key_for(client, "alpha", ["tenant-admin"])
    sign_in(client, lead)
    assert client.get("/console/workloads").status_code == 200
    key_id = lead.split("_")[2]
    revoked = client.delete(f"/api/v1/admin/tenants/alpha/keys/{key_id}", headers=bearer(ADMIN_KEY))
    assert revoked.status_code == 200, revoked.text
    answer = client.get("/console/workloads", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"].startswith("/console/login")
    assert client.get("/console/dashboard", follow_redirects=False).status_code == 303


def test_the_openapi_page_loads_its_assets_from_the_gateway(client: TestClient[Any]) -> None:
    page = client.get("/schema")
    assert page.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources and all(s.startswith("/console/static/vendor/") for s in sources), sources
    assert (
        "http://" not in page.text.split("<body")[0]
        and "https://" not in page.text.split("<body")[0]
    )
    for source in sources:
        asset = client.get(source)
        assert asset.status_code == 200 and len(asset.content) > 1000, source
    assert client.get("/schema/openapi.json").json()["info"]["title"] == "Ignara Gateway"


def test_over_https_the_cookie_is_secure(settings: Settings) -> None:
    with TestClient(app=create_app(settings), base_url="https://console.example") as client:
        page = client.get("/console/login")
        cookie = page.headers["set-cookie"]
        assert "Secure" in cookie and "HttpOnly" in cookie
    with TestClient(app=create_app(settings)) as client:
        assert "Secure" not in client.get("/console/login").headers["set-cookie"]


def test_the_cohorts_page_is_a_platform_admins(client: TestClient[Any]) -> None:
    sign_in(client, ADMIN_KEY)
    page = client.get("/console/cohorts")
    assert page.status_code == 200
    assert "<h1>Cohorts</h1>" in page.text and 'data-testid="api-error"' not in page.text
    served = client.get("/api/v1/admin/cohorts", headers=bearer(ADMIN_KEY)).status_code
    if served == 404:
        assert "once this gateway serves /api/v1/admin/cohorts" in page.text
    client.post("/console/logout", data={"csrf": csrf_of(page.text)})
    sign_in(client, key_for(client, "alpha", ["tenant-admin"]))
    redirected = client.get("/console/cohorts", follow_redirects=False)
    assert redirected.headers["location"] == "/console/dashboard"
    assert "/console/cohorts" not in client.get("/console/dashboard").text


def test_the_audit_log_is_whole_for_a_platform_admin(client: TestClient[Any]) -> None:
    sign_in(client, ADMIN_KEY)
    page = client.get("/console/audit", params={"kind": "<script>"})
    assert page.status_code == 200 and "<h1>Audit log</h1>" in page.text
    assert "<script>" not in page.text.replace('<script src="/console/static/console.js"', "")
    if client.get("/api/v1/admin/audit", headers=bearer(ADMIN_KEY)).status_code == 200:
        assert 'data-testid="audit"' in page.text
        flavors = client.get("/console/audit", params={"kind": "flavor"}).text
        assert "<td>h100</td>" in flavors  # the fixture's apply made it, audited
    else:
        assert "once this gateway serves /api/v1/admin/audit" in page.text
    client.post("/console/logout", data={"csrf": csrf_of(page.text)})
    sign_in(client, key_for(client, "alpha", ["tenant-admin"]))
    scoped = client.get("/console/audit", params={"kind": "flavor"})  # a tenant admin: its own
    assert scoped.status_code == 200 and "<td>h100</td>" not in scoped.text
