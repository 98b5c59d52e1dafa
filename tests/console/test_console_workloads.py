"""Workloads in the console over HTTP: a platform admin opens any tenant's workload (its
events and why it waits) and cancels it, audited with the admin as actor; a tenant admin
opens and cancels only its own tenant's (another's is 404, as if it did not exist)."""

from __future__ import annotations

import re
import time
from typing import Any

from litestar.testing import TestClient

from tests.admin.test_queue_preview import ADMIN, gang, key, submit
from tests.conftest import ADMIN_KEY
from tests.console.test_console_http import csrf_of, sign_in
from tests.console.test_console_pages import client, state_of

__all__ = ["client"]


def test_a_platform_admin_opens_and_cancels_any_tenants_workload(
    client: TestClient[Any],
) -> None:
    beta = key(client, "beta")
    waiting = submit(client, beta, gang("beta-job", "team-b", 10))  # more than the cohort
    sign_in(client, ADMIN_KEY)

    # as the filter form sends it: "any" state and queue are empty fields
    listed = client.get("/console/workloads", params={"tenant": "beta", "queue": "", "state": ""})
    assert listed.status_code == 200, listed.text
    assert f'href="/console/workloads/{waiting}"' in listed.text

    page = client.get(f"/console/workloads/{waiting}")
    assert page.status_code == 200, page.text
    assert 'data-testid="tenant"><a href="/console/tenants/beta">beta</a><' in page.text
    assert 'data-testid="state">pending<' in page.text
    assert re.search(r'data-testid="events">.*submitted', page.text, re.S)
    # why it waits, level by level, once the admission pass has looked at it
    assert 'data-testid="blocking"' in _settled(client, f"/console/workloads/{waiting}")
    assert client.get(f"/console/workloads/{'0' * 32}").status_code == 404

    csrf = csrf_of(page.text)
    path = f"/console/workloads/{waiting}/cancel"
    assert client.post(path, data={}).status_code == 403  # no CSRF token: refused
    assert state_of(client, beta, waiting) == "pending"
    done = client.post(path, data={"csrf": csrf}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == f"/console/workloads/{waiting}"
    shown = client.get(done.headers["location"]).text
    assert "Cancel requested." in shown and 'data-testid="state">cancelled<' in shown
    assert "Cancel workload" not in shown
    assert state_of(client, beta, waiting) == "cancelled"
    audit = client.get(
        "/api/v1/admin/audit",
        params={"kind": "workload", "name": waiting, "action": "cancel"},
        headers=ADMIN,
    ).json()["items"]
    assert [(e["actor"], e["tenant"]) for e in audit] == [("bootstrap-admin", "beta")]


def test_a_tenant_admin_opens_only_its_own_tenants_workloads(client: TestClient[Any]) -> None:
    mine = submit(client, key(client, "alpha"), gang("alpha-job", "team-a", 10))
    beta = key(client, "beta")
    theirs = submit(client, beta, gang("beta-job", "team-b", 10))
    sign_in(client, key(client, "alpha", "tenant-admin"))

    own = client.get(f"/console/workloads/{mine}")
    assert own.status_code == 200 and 'data-testid="tenant">alpha<' in own.text
    other = client.get(f"/console/workloads/{theirs}")
    assert other.status_code == 404 and "beta-job" not in other.text
    csrf = csrf_of(own.text)
    refused = client.post(f"/console/workloads/{theirs}/cancel", data={"csrf": csrf})
    assert refused.status_code == 404
    assert state_of(client, beta, theirs) == "pending"
    listed = client.get("/console/workloads").text
    assert f'href="/console/workloads/{mine}"' in listed and theirs not in listed


def _settled(client: TestClient[Any], path: str) -> str:
    """The page once the admission pass has said why the workload waits."""
    deadline = time.monotonic() + 10
    while 'data-testid="blocking"' not in (text := client.get(path).text):
        if time.monotonic() > deadline:
            return text
        time.sleep(0.2)
    return text
