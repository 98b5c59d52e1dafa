"""Without a signed-in session every console page and change answers with the sign-in
page (303), carrying the console's security headers like any other answer."""

from __future__ import annotations

from typing import Any

from litestar.testing import TestClient

from gateway.console import CSP
from tests.console.test_console_http import csrf_of
from tests.console.test_console_pages import client

__all__ = ["client"]

WORKLOAD = "0" * 32
PAGES = [
    "/console/queues",
    "/console/queues/team-a",
    "/console/models",
    "/console/models/edit?name=org/llama",
    "/console/backends",
    "/console/backends/rayb",
    "/console/tenants/alpha",
    "/console/keys",
    "/console/workloads",
    f"/console/workloads/{WORKLOAD}",
]
CHANGES = [
    "/console/queues/team-a/save",
    "/console/models/create",
    "/console/backends/rayb/delete",
    "/console/tenant-create",
    "/console/tenants/alpha/keys",
    "/console/tenants/alpha/keys/abc123/limits",
    "/console/keys",
    "/console/keys/abc123/limits",
    "/console/keys/abc123/rotate",
    "/console/keys/abc123/revoke",
    f"/console/workloads/{WORKLOAD}/cancel",
]


def test_a_signed_out_browser_is_sent_to_sign_in(client: TestClient[Any]) -> None:
    for path in PAGES:
        answer = client.get(path, follow_redirects=False)
        assert answer.status_code == 303, (path, answer.text)
        assert answer.headers["location"] == "/console/login", path
        assert answer.headers["content-security-policy"] == CSP, path
        assert answer.headers["cache-control"] == "no-store", path
    # a session that has not signed in passes the CSRF check with its token, and is
    # still sent to sign in: nothing changes
    csrf = csrf_of(client.get("/console/login").text)
    for path in CHANGES:
        answer = client.post(path, data={"csrf": csrf}, follow_redirects=False)
        assert answer.status_code == 303, (path, answer.text)
        assert answer.headers["location"] == "/console/login", path
