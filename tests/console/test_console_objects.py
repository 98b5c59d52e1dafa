"""Flavors, cohorts, new and deleted cluster queues, and the platform settings in the
console over HTTP: each change goes through the admin API with the CSRF token and the
version it read; a refused delete shows the API's 409 reason, a stale edit its 412, a
value the API refuses its reason next to the form; each change is in the audit log; a
tenant admin has none of these pages."""

from __future__ import annotations

from typing import Any

from litestar.testing import TestClient

from tests.admin.test_queue_preview import ADMIN, GPU, bearer, gang, key, submit, wait_for
from tests.conftest import ADMIN_KEY
from tests.console.test_console_http import csrf_of, sign_in
from tests.console.test_console_pages import client, version_of

__all__ = ["client"]

API = "/api/v1/admin"


def spec(client: TestClient[Any], kind: str, name: str) -> Any:
    answer = client.get(f"{API}/config/{kind}/{name}", headers=ADMIN)
    return answer.json()["spec"] if answer.status_code == 200 else None


def row(i: int, flavor: str, resource: str, nominal: str, **limits: str) -> dict[str, str]:
    return {
        f"group-{i}": "1",
        f"flavor-{i}": flavor,
        f"resource-{i}": resource,
        f"nominal-{i}": nominal,
        **{f"{k}-{i}": v for k, v in limits.items()},
    }


def audited(client: TestClient[Any], kind: str, name: str) -> list[str]:
    entries = client.get(f"{API}/audit", params={"kind": kind, "name": name}, headers=ADMIN)
    return [e["action"] for e in entries.json()["items"]]


def test_flavors_are_created_edited_and_a_refused_delete_says_why(
    client: TestClient[Any],
) -> None:
    sign_in(client, ADMIN_KEY)
    page = client.get("/console/flavors")
    assert page.status_code == 200 and 'data-testid="flavors"' in page.text
    assert ">h100</a>" in page.text
    csrf = csrf_of(page.text)
    bad = client.post("/console/flavors/create", data={"csrf": csrf, "name": "Not A Name"})
    assert bad.status_code == 422 and 'data-testid="form-error"' in bad.text
    assert "name" in bad.text and "<!doctype html>" in bad.text
    made = client.post(
        "/console/flavors/create",
        data={"csrf": csrf, "name": "a100", "backend": "local"},
        follow_redirects=False,
    )
    assert made.status_code == 303, made.text
    assert spec(client, "flavors", "a100") == {"name": "a100"}
    assert ">a100</a>" in client.get("/console/flavors").text
    unknown = client.post(
        "/console/flavors/create", data={"csrf": csrf, "name": "b200", "backend": "nowhere"}
    )
    assert unknown.status_code == 422 and "nowhere" in unknown.text
    assert spec(client, "flavors", "b200") is None

    edit = client.get("/console/flavors/a100")
    version = version_of(edit.text)
    saved = client.post(
        "/console/flavors/a100/save", data={"csrf": csrf, "version": version, "backend": "local"}
    )
    assert saved.status_code == 200 and 'data-testid="saved"' in saved.text
    stale = client.post(
        "/console/flavors/a100/save", data={"csrf": csrf, "version": "999", "backend": "local"}
    )
    assert stale.status_code == 412 and "someone changed this flavor" in stale.text

    # h100 is what team-a and team-b have quota for: the API's 409 says so
    now = version_of(client.get("/console/flavors/h100").text)
    blocked = client.post("/console/flavors/h100/delete", data={"csrf": csrf, "version": now})
    assert blocked.status_code == 409 and "Not deleted" in blocked.text
    assert "team-a" in blocked.text or "team-b" in blocked.text, blocked.text
    assert spec(client, "flavors", "h100") is not None
    now = version_of(client.get("/console/flavors/a100").text)
    gone = client.post("/console/flavors/a100/delete", data={"csrf": csrf, "version": now})
    assert gone.status_code == 200 and "Flavor a100 deleted" in gone.text
    assert spec(client, "flavors", "a100") is None
    assert {"create", "delete"} <= set(audited(client, "flavor", "a100")), audited(
        client, "flavor", "a100"
    )
    audit_page = client.get("/console/audit", params={"kind": "flavor"})
    assert "a100" in audit_page.text


def test_cohorts_are_created_with_quotas_edited_and_a_refused_delete_says_why(
    client: TestClient[Any],
) -> None:
    sign_in(client, ADMIN_KEY)
    page = client.get("/console/cohorts")
    assert page.status_code == 200 and 'data-testid="cohorts"' in page.text
    assert 'data-testid="create-cohort"' in page.text and 'data-testid="quota-grid"' in page.text
    csrf = csrf_of(page.text)
    form = {"csrf": csrf, "name": "research", "parent": "pool", "fair_weight": "2", "rows": "4"}
    not_quantity = client.post(
        "/console/cohorts/create", data={**form, **row(0, "h100", GPU, "lots")}
    )
    assert not_quantity.status_code == 422 and "not a quantity" in not_quantity.text
    assert 'value="lots"' in not_quantity.text  # the form as typed
    refused = client.post("/console/cohorts/create", data={**form, **row(0, "z9", GPU, "2")})
    assert refused.status_code == 422 and 'data-testid="form-error"' in refused.text
    assert "z9" in refused.text and "research" in refused.text, refused.text
    made = client.post(
        "/console/cohorts/create",
        data={**form, **row(0, "h100", GPU, "2", borrowing_limit="1")},
        follow_redirects=False,
    )
    assert made.status_code == 303, made.text
    assert spec(client, "cohorts", "research") == {
        "name": "research",
        "parent": "pool",
        "fair_weight": 2,
        "resource_groups": [
            {
                "resources": [GPU],
                "flavors": [
                    {"name": "h100", "quotas": {GPU: {"nominal": 2, "borrowing_limit": 1}}}
                ],
            }
        ],
    }
    listed = client.get("/console/cohorts").text
    assert ">research</a>" in listed and "h100 nvidia.com/gpu: 2" in listed

    edit = client.get("/console/cohorts/research")
    assert 'data-testid="nominal-0"' in edit.text and 'value="2"' in edit.text
    version = version_of(edit.text)
    changed = {"csrf": csrf, "version": version, "parent": "pool", "rows": "4"}
    saved = client.post(
        "/console/cohorts/research/save", data={**changed, **row(0, "h100", GPU, "3")}
    )
    assert saved.status_code == 200 and "Cohort research saved" in saved.text
    assert spec(client, "cohorts", "research")["resource_groups"][0]["flavors"][0]["quotas"] == {
        GPU: {"nominal": 3}
    }
    stale = client.post(
        "/console/cohorts/research/save", data={**changed, **row(0, "h100", GPU, "5")}
    )
    assert stale.status_code == 412 and "someone changed this cohort" in stale.text

    pool = version_of(client.get("/console/cohorts/pool").text)
    blocked = client.post("/console/cohorts/pool/delete", data={"csrf": csrf, "version": pool})
    assert blocked.status_code == 409 and "Not deleted" in blocked.text
    assert spec(client, "cohorts", "pool") is not None
    now = version_of(client.get("/console/cohorts/research").text)
    gone = client.post("/console/cohorts/research/delete", data={"csrf": csrf, "version": now})
    assert gone.status_code == 200 and "Cohort research deleted" in gone.text
    assert spec(client, "cohorts", "research") is None
    assert {"create", "update", "delete"} <= set(audited(client, "cohort", "research"))


def test_a_queue_is_created_in_a_cohort_and_a_used_one_is_not_deleted(
    client: TestClient[Any],
) -> None:
    sign_in(client, ADMIN_KEY)
    page = client.get("/console/queues")
    assert 'data-testid="create-queue"' in page.text
    csrf = csrf_of(page.text)
    form = {
        "csrf": csrf,
        "name": "team-c",
        "cohort": "pool",
        "queueing_strategy": "StrictFIFO",
        "within_cluster_queue": "LowerPriority",
        "reclaim_within_cohort": "Any",
        "borrow_within_cohort": "LowerPriority",
        "rows": "4",
    }
    empty = client.post("/console/queues/create", data=form)
    assert empty.status_code == 422 and "at least one flavor" in empty.text
    unknown = client.post("/console/queues/create", data={**form, **row(0, "z9", GPU, "2")})
    assert unknown.status_code == 422 and "z9" in unknown.text
    assert 'data-testid="form-error"' in unknown.text
    made = client.post(
        "/console/queues/create",
        data={**form, **row(0, "h100", GPU, "2", lending_limit="1")},
        follow_redirects=False,
    )
    assert made.status_code == 303 and made.headers["location"] == "/console/queues/team-c"
    created = spec(client, "cluster-queues", "team-c")
    assert created["cohort"] == "pool" and created["queueing_strategy"] == "StrictFIFO"
    assert created["preemption"] == {
        "within_cluster_queue": "LowerPriority",
        "reclaim_within_cohort": "Any",
        "borrow_within_cohort": {"policy": "LowerPriority"},
    }
    assert created["resource_groups"][0]["flavors"][0]["quotas"] == {
        GPU: {"nominal": 2, "lending_limit": 1}
    }
    taken = client.post("/console/queues/create", data={**form, **row(0, "h100", GPU, "2")})
    assert taken.status_code == 409 and 'data-testid="form-error"' in taken.text

    # its settings and flavors: out of the cohort, best effort, a second resource
    detail = client.get("/console/queues/team-c")
    assert 'data-testid="queue-settings"' in detail.text
    version = version_of(detail.text)
    moved = {
        **form,
        "version": version,
        "cohort": "",
        "queueing_strategy": "BestEffortFIFO",
        "borrow_within_cohort": "Never",
        **row(0, "h100", GPU, "2"),
        **row(1, "h100", "cpu", "16"),
    }
    del moved["name"]
    unknown_flavor = client.post(
        "/console/queues/team-c/settings", data={**moved, **row(1, "z9", "cpu", "16")}
    )
    assert unknown_flavor.status_code == 422 and "z9" in unknown_flavor.text
    assert 'data-testid="queue-settings-box" open' in unknown_flavor.text
    saved = client.post("/console/queues/team-c/settings", data=moved)
    assert saved.status_code == 200 and "Saved queue team-c" in saved.text, saved.text
    now = spec(client, "cluster-queues", "team-c")
    assert (
        "cohort" not in now and now.get("queueing_strategy", "BestEffortFIFO") == "BestEffortFIFO"
    )
    assert now["preemption"] == {
        "within_cluster_queue": "LowerPriority",
        "reclaim_within_cohort": "Any",
    }
    assert now["resource_groups"] == [
        {
            "resources": [GPU, "cpu"],
            "flavors": [{"name": "h100", "quotas": {GPU: {"nominal": 2}, "cpu": {"nominal": 16}}}],
        }
    ]
    again = client.post("/console/queues/team-c/settings", data=moved)
    assert again.status_code == 412 and "someone changed this queue" in again.text

    # team-a is alpha's: the API's 409 names the tenant
    detail = client.get("/console/queues/team-a")
    assert 'data-testid="delete-queue"' in detail.text
    version = version_of(detail.text)
    blocked = client.post("/console/queues/team-a/delete", data={"csrf": csrf, "version": version})
    assert blocked.status_code == 409 and "Not deleted" in blocked.text and "alpha" in blocked.text
    assert spec(client, "cluster-queues", "team-a") is not None

    stale = client.post("/console/queues/team-c/delete", data={"csrf": csrf, "version": "999"})
    assert stale.status_code == 412 and "someone changed this queue" in stale.text
    now = version_of(client.get("/console/queues/team-c").text)
    gone = client.post("/console/queues/team-c/delete", data={"csrf": csrf, "version": now})
    assert gone.status_code == 200 and "Queue team-c deleted" in gone.text
    assert spec(client, "cluster-queues", "team-c") is None
    assert {"create", "delete"} <= set(audited(client, "cluster_queue", "team-c"))


def test_the_platform_settings_are_read_and_changed(client: TestClient[Any]) -> None:
    sign_in(client, ADMIN_KEY)
    page = client.get("/console/settings")
    assert page.status_code == 200 and 'data-testid="settings"' in page.text
    csrf, version = csrf_of(page.text), version_of(page.text)
    form = {
        "csrf": csrf,
        "version": version,
        "fair_sharing": "on",
        "budget_period": "week",
        "currency": "eur",
        "prices": "h100 nvidia.com/gpu-hours 2.50\n",
        "default_max_tokens": "2048",
        "max_call_tokens": "",
        "waiting": "team-a 5",
    }
    wrong = client.post("/console/settings/save", data={**form, "prices": "z9 input-tokens 1"})
    assert wrong.status_code == 422 and 'data-testid="form-error"' in wrong.text
    assert "z9" in wrong.text and "z9 input-tokens 1" in wrong.text  # as typed
    saved = client.post("/console/settings/save", data=form)
    assert saved.status_code == 200 and "Settings saved" in saved.text, saved.text
    now = client.get(f"{API}/settings", headers=ADMIN).json()["spec"]
    assert now["fair_sharing"] is True and now["budget_period"] == "week"
    assert now["prices"] == {
        "currency": "EUR",
        "flavors": {"h100": {"nvidia.com/gpu-hours": "2.5"}},
    }
    assert now["inference"]["default_max_tokens"] == 2048
    assert now["inference"]["waiting"] == [{"queue": "team-a", "max_wait_seconds": 5.0}]
    assert 'value="2048"' in saved.text and "h100 nvidia.com/gpu-hours 2.5" in saved.text
    stale = client.post("/console/settings/save", data={**form, "budget_period": "day"})
    assert stale.status_code == 412 and "someone changed the settings" in stale.text
    assert client.get(f"{API}/settings", headers=ADMIN).json()["spec"]["budget_period"] == "week"
    # no prices lines: no prices
    fresh = version_of(client.get("/console/settings").text)
    cleared = client.post(
        "/console/settings/save", data={**form, "version": fresh, "prices": "", "fair_sharing": ""}
    )
    assert cleared.status_code == 200 and "Settings saved" in cleared.text
    now = client.get(f"{API}/settings", headers=ADMIN).json()["spec"]
    assert now["prices"] is None and now["fair_sharing"] is False
    for setting in ("fair_sharing", "budget_period", "prices", "inference"):
        assert "update" in audited(client, "setting", setting), setting
    assert "budget_period" in client.get("/console/audit", params={"kind": "setting"}).text


def test_a_tenant_admin_has_none_of_these_pages(client: TestClient[Any]) -> None:
    sign_in(client, key(client, "alpha", "tenant-admin"))
    dashboard = client.get("/console/dashboard").text
    for path in ("/console/flavors", "/console/settings"):
        assert f'href="{path}"' not in dashboard
    for path in (
        "/console/flavors",
        "/console/flavors/h100",
        "/console/cohorts/pool",
        "/console/settings",
    ):
        answer = client.get(path)
        assert answer.status_code == 403, (path, answer.text)
    csrf = csrf_of(dashboard)
    for path, data in [
        ("/console/flavors/create", {"name": "evil"}),
        ("/console/flavors/h100/delete", {"version": "1"}),
        ("/console/cohorts/create", {"name": "evil", "rows": "0"}),
        ("/console/cohorts/pool/delete", {"version": "1"}),
        ("/console/queues/create", {"name": "evil", "rows": "0"}),
        ("/console/queues/team-a/delete", {"version": "1"}),
        ("/console/settings/save", {"version": "1", "budget_period": "day"}),
    ]:
        answer = client.post(path, data={"csrf": csrf, **data})
        assert answer.status_code == 403, (path, answer.text)
    assert spec(client, "flavors", "evil") is None and spec(client, "cohorts", "evil") is None
    assert spec(client, "flavors", "h100") is not None
    assert spec(client, "cluster-queues", "team-a") is not None
    assert client.get(f"{API}/settings", headers=ADMIN).json()["spec"]["budget_period"] == "month"


def test_every_change_here_needs_the_csrf_token(client: TestClient[Any]) -> None:
    sign_in(client, ADMIN_KEY)
    for path, data in [
        ("/console/flavors/create", {"name": "a100"}),
        ("/console/flavors/h100/save", {"version": "1", "backend": "local"}),
        ("/console/flavors/h100/delete", {"version": "1"}),
        ("/console/cohorts/create", {"name": "evil", "rows": "0"}),
        ("/console/cohorts/pool/save", {"version": "1", "rows": "0"}),
        ("/console/cohorts/pool/delete", {"version": "1"}),
        ("/console/queues/create", {"name": "evil", "rows": "0"}),
        ("/console/queues/team-a/delete", {"version": "1"}),
        ("/console/settings/save", {"version": "1", "budget_period": "day"}),
    ]:
        answer = client.post(path, data=data, follow_redirects=False)
        assert answer.status_code == 403, (path, answer.text)
        assert 'data-testid="csrf-refused"' in answer.text
    assert spec(client, "flavors", "a100") is None
    assert spec(client, "cohorts", "pool") is not None
    assert client.get(f"{API}/settings", headers=ADMIN).json()["spec"]["budget_period"] == "month"


def test_a_queue_with_admitted_work_is_not_deleted_and_says_why(client: TestClient[Any]) -> None:
    member = key(client, "alpha")
    running = submit(client, member, gang("still-running", "team-a", 1, seconds=60))
    wait_for(client, member, running, {"admitted", "running"})
    # alpha no longer submits to team-a: what is left is the work in it
    tenant = client.get(f"{API}/tenants/alpha", headers=ADMIN)
    moved = client.put(
        f"{API}/tenants/alpha",
        json={**tenant.json()["spec"], "queues": ["team-b"]},
        headers={**ADMIN, "If-Match": tenant.headers["etag"]},
    )
    assert moved.status_code == 200, moved.text
    sign_in(client, ADMIN_KEY)
    detail = client.get("/console/queues/team-a")
    blocked = client.post(
        "/console/queues/team-a/delete",
        data={"csrf": csrf_of(detail.text), "version": version_of(detail.text)},
    )
    assert blocked.status_code == 409 and "Not deleted" in blocked.text
    assert "admitted work" in blocked.text and "still-running" in blocked.text, blocked.text
    assert spec(client, "cluster-queues", "team-a") is not None
    cancelled = client.delete(f"/api/v1/workloads/{running}", headers=bearer(member))
    assert cancelled.status_code < 300, cancelled.text
