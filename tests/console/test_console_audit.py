"""The audit page for a tenant admin: its own tenant's entries, none of another's, with no
tenant filter to reach past it (the API scopes what it reads)."""

from __future__ import annotations

import re
from typing import Any

from litestar.testing import TestClient

from tests.admin.test_queue_preview import gang, key, submit
from tests.conftest import ADMIN_KEY
from tests.console.test_console_http import sign_in
from tests.console.test_console_pages import client

__all__ = ["client"]


def names_in(page: str) -> set[str]:
    """The audit table's object names (a workload's is its id)."""
    table = re.search(r'data-testid="audit">(.*?)</table>', page, re.S)
    assert table is not None, page
    return set(re.findall(r"<td>([0-9a-f]{32})</td>", table.group(1)))


def test_a_tenant_admin_reads_its_own_tenants_audit_and_none_of_anothers(
    client: TestClient[Any],
) -> None:
    mine = submit(client, key(client, "alpha"), gang("alpha-job", "team-a", 10))
    theirs = submit(client, key(client, "beta"), gang("beta-job", "team-b", 10))
    lead = key(client, "alpha", "tenant-admin")

    sign_in(client, ADMIN_KEY)
    whole = client.get("/console/audit", params={"kind": "workload"}).text
    assert {mine, theirs} <= names_in(whole)  # the platform admin reads both
    every_key = client.get("/console/audit", params={"kind": "api_key"}).text
    assert "<td>beta</td>" in every_key
    client.cookies.clear()

    sign_in(client, lead)
    dashboard = client.get("/console/dashboard").text
    assert 'href="/console/audit"' in dashboard  # in its navigation now
    page = client.get("/console/audit", params={"kind": "workload"})
    assert page.status_code == 200, page.text
    assert names_in(page.text) == {mine}
    assert 'name="tenant"' not in page.text  # no filter reaching past its tenant
    assert "alpha&#x27;s entries only" in page.text or "alpha's entries only" in page.text
    keys = client.get("/console/audit", params={"kind": "api_key"}).text
    assert "<td>alpha</td>" in keys and "<td>beta</td>" not in keys
    # a tenant named in the URL is not a filter it has: still its own entries only
    asked = client.get("/console/audit", params={"kind": "workload", "tenant": "beta"})
    assert names_in(asked.text) == {mine}
