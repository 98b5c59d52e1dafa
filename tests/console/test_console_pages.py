"""The console's queue, model, backend, tenant and workloads pages over HTTP: each reads
and changes only through the admin API, every change carries the CSRF token and the
version it read, a stale version and a refused delete are shown with the API's reason."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import Settings
from tests.admin.test_queue_preview import CONFIG, GPU, bearer, gang, key, queue, submit
from tests.conftest import ADMIN_KEY
from tests.console.test_console_http import csrf_of, sign_in

ADMIN = bearer(ADMIN_KEY)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient[Any]]:
    with TestClient(app=create_app(settings)) as client:
        answer = client.post("/api/v1/admin/config", json=CONFIG, headers=ADMIN)
        assert answer.status_code == 201, answer.text
        yield client


def version_of(page: str) -> str:
    match = re.search(r'name="version" value="([0-9]+)"', page)
    assert match is not None, page
    return match.group(1)


def quota_form(page: str, nominal: str) -> dict[str, str]:
    """The editor's fields as the page has them, team-a's GPU nominal changed."""
    fields = dict(
        re.findall(
            r'<input name="((?:nominal|borrowing_limit|lending_limit)-[^"]+)" value="([^"]*)"', page
        )
    )
    assert fields, page
    fields["nominal-0-0-0"] = nominal
    return {**fields, "csrf": csrf_of(page), "version": version_of(page)}


def spec_nominal(client: TestClient[Any], name: str) -> Any:
    spec = client.get(f"/api/v1/admin/config/cluster-queues/{name}", headers=ADMIN).json()["spec"]
    return spec["resource_groups"][0]["flavors"][0]["quotas"][GPU]["nominal"]


def state_of(client: TestClient[Any], token: str, workload: str) -> str:
    return str(client.get(f"/api/v1/workloads/{workload}", headers=bearer(token)).json()["state"])


def live_page(client: TestClient[Any], path: str, needle: str = "") -> Any:
    """The page, once the live board (up to two seconds old) knows the config."""
    deadline = time.monotonic() + 10
    while (page := client.get(path)).status_code != 200 or needle not in page.text:
        assert time.monotonic() < deadline, page.text
        time.sleep(0.2)
    return page


def test_the_queue_editor_previews_refuses_a_stale_version_and_saves(
    client: TestClient[Any],
) -> None:
    alpha = key(client, "alpha")
    waiting = submit(client, alpha, gang("too-big", "team-a", 10))
    sign_in(client, ADMIN_KEY)
    tree = live_page(client, "/console/cohorts", "team-a")
    assert '<a href="/console/queues/team-a">team-a</a>' in tree.text
    page = live_page(client, "/console/queues/team-a")
    assert 'data-testid="quota-editor"' in page.text and 'value="4"' in page.text

    # a value that is no quantity: said, nothing sent
    bad = client.post("/console/queues/team-a/preview", data=quota_form(page.text, "four"))
    assert bad.status_code == 200 and 'data-testid="form-error"' in bad.text
    assert "is not a quantity" in bad.text

    # a quantity the console lets through and the API refuses: the API's reason shown
    refused = client.post("/console/queues/team-a/save", data=quota_form(page.text, "4zz"))
    assert refused.status_code == 422 and 'data-testid="form-error"' in refused.text
    assert spec_nominal(client, "team-a") == 4

    preview = client.post("/console/queues/team-a/preview", data=quota_form(page.text, "10"))
    assert preview.status_code == 200, preview.text
    assert 'data-testid="preview-admitted-count">1<' in preview.text
    assert waiting in preview.text and "this change" in preview.text
    assert 'value="10"' in preview.text  # the form keeps what was typed
    assert spec_nominal(client, "team-a") == 4 and state_of(client, alpha, waiting) == "pending"

    # someone else saves first: this page's version is stale
    spec = client.get("/api/v1/admin/config/cluster-queues/team-a", headers=ADMIN)
    theirs = spec.json()["spec"]
    theirs["resource_groups"][0]["flavors"][0]["quotas"][GPU]["nominal"] = 5
    other = client.put(
        "/api/v1/admin/config/cluster-queues/team-a",
        json=theirs,
        headers={**ADMIN, "If-Match": spec.headers["etag"]},
    )
    assert other.status_code == 200, other.text
    stale = client.post("/console/queues/team-a/save", data=quota_form(page.text, "10"))
    assert stale.status_code == 412 and "someone changed this queue" in stale.text
    assert spec_nominal(client, "team-a") == 5  # theirs stands
    assert 'value="5"' in stale.text  # and the form now shows it

    saved = client.post(
        "/console/queues/team-a/save",
        data=quota_form(stale.text, "10"),
        follow_redirects=False,
    )
    assert saved.status_code == 303, saved.text
    assert 'data-testid="saved"' in client.get(saved.headers["location"]).text
    assert spec_nominal(client, "team-a") == 10
    deadline = time.monotonic() + 15
    while state_of(client, alpha, waiting) == "pending":
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_a_tenant_admin_reads_its_own_queue_and_edits_nothing(client: TestClient[Any]) -> None:
    sign_in(client, key(client, "alpha", "tenant-admin"))
    page = live_page(client, "/console/queues/team-a")
    assert 'data-testid="quota"' in page.text and 'data-testid="quota-editor"' not in page.text
    assert client.get("/console/queues/team-b").status_code == 404
    csrf = csrf_of(client.get("/console/dashboard").text)
    form = {"csrf": csrf, "version": "1", "nominal-0-0-0": "100"}
    assert client.post("/console/queues/team-a/save", data=form).status_code == 403
    assert client.post("/console/queues/team-a/preview", data=form).status_code == 403
    assert client.get("/console/models").status_code == 403
    assert client.get("/console/backends").status_code == 403
    assert spec_nominal(client, "team-a") == 4


def test_the_queue_list_is_paged(client: TestClient[Any]) -> None:
    many = {**CONFIG, "cluster_queues": [queue(f"q-{i:03d}", 1) for i in range(55)]}
    many["cluster_queues"] += CONFIG["cluster_queues"]
    assert client.post("/api/v1/admin/config", json=many, headers=ADMIN).status_code == 201
    sign_in(client, ADMIN_KEY)
    deadline = time.monotonic() + 10
    while "q-000" not in (first := client.get("/console/queues")).text:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert first.text.count('href="/console/queues/q-') == 50
    link = re.search(r'href="(/console/queues\?[^"]+)" data-testid="next"', first.text)
    assert link is not None
    second = client.get(link.group(1).replace("&amp;", "&"))
    assert "q-054" in second.text and "team-b" in second.text and "q-000" not in second.text


@pytest.fixture
def checking(settings: Settings) -> Iterator[TestClient[Any]]:
    """A gateway whose endpoint health checks run every 0.2 s."""
    inference = dataclasses.replace(settings.inference, health_interval=0.2)
    app = create_app(dataclasses.replace(settings, inference=inference))
    with TestClient(app=app) as client:
        assert client.post("/api/v1/admin/config", json=CONFIG, headers=ADMIN).status_code == 201
        yield client


def test_models_are_listed_with_health_created_edited_and_deleted(
    checking: TestClient[Any],
) -> None:
    client = checking
    sign_in(client, ADMIN_KEY)
    page = client.get("/console/models")
    assert page.status_code == 200 and 'data-testid="create-model"' in page.text
    csrf = csrf_of(page.text)
    bad = client.post(
        "/console/models/create",
        data={"csrf": csrf, "name": "org/llama", "flavor": "h100", "endpoints": "ftp://x"},
    )
    assert bad.status_code == 422 and "http(s)://" in bad.text
    created = client.post(
        "/console/models/create",
        data={
            "csrf": csrf,
            "name": "org/llama",
            "flavor": "h100",
            "endpoints": "http://127.0.0.1:9/v1 weight=2",
        },
        follow_redirects=False,
    )
    assert created.status_code == 303, created.text
    # nothing listens there: the health checks (every 0.2 s here) say so
    listed = live_page(client, "/console/models", 'data-testid="health">unreachable<').text
    assert "org/llama" in listed and "http://127.0.0.1:9/v1" in listed
    again = client.post(
        "/console/models/create",
        data={"csrf": csrf, "name": "org/llama", "flavor": "h100", "endpoints": "http://x.y/v1"},
    )
    assert again.status_code == 422 and "already exists" in again.text

    edit = client.get("/console/models/edit", params={"name": "org/llama"})
    assert "weight=2" in edit.text
    form = {
        "csrf": csrf,
        "name": "org/llama",
        "version": version_of(edit.text),
        "flavor": "h100",
        "endpoints": "http://127.0.0.1:9/v1\nhttp://127.0.0.2:9/v1",
    }
    saved = client.post("/console/models/save", data=form, follow_redirects=False)
    assert saved.status_code == 303, saved.text
    model = client.get("/api/v1/admin/models/org/llama", headers=ADMIN).json()
    assert len(model["endpoints"]) == 2
    stale = client.post("/console/models/save", data=form)  # the old version again
    assert stale.status_code == 412 and "someone changed this model" in stale.text
    # a name that is a path trick never reaches another route
    assert client.get("/console/models/edit", params={"name": "org/../config"}).status_code == 400

    gone = client.post(
        "/console/models/delete",
        data={"csrf": csrf, "name": "org/llama", "version": str(model["version"])},
        follow_redirects=False,
    )
    assert gone.status_code == 303
    assert client.get("/api/v1/admin/models/org/llama", headers=ADMIN).status_code == 404


def test_backends_are_created_edited_and_a_refused_delete_says_why(
    client: TestClient[Any],
) -> None:
    sign_in(client, ADMIN_KEY)
    page = client.get("/console/backends")
    assert page.status_code == 200 and 'data-testid="backends"' in page.text
    csrf = csrf_of(page.text)
    not_json = client.post(
        "/console/backends/create",
        data={"csrf": csrf, "name": "rayb", "kind": "ray", "settings": "{url"},
    )
    assert not_json.status_code == 422 and "not JSON" in not_json.text
    refused = client.post(
        "/console/backends/create",
        data={"csrf": csrf, "name": "rayb", "kind": "ray", "settings": '{"colour": "red"}'},
    )
    assert refused.status_code == 422 and 'data-testid="form-error"' in refused.text
    created = client.post(
        "/console/backends/create",
        data={
            "csrf": csrf,
            "name": "rayb",
            "kind": "ray",
            "settings": '{"url": "http://127.0.0.1:8265"}',
        },
        follow_redirects=False,
    )
    assert created.status_code == 303, created.text
    flavor = client.post(
        "/api/v1/admin/config/flavors", json={"name": "ray-pool", "backend": "rayb"}, headers=ADMIN
    )
    assert flavor.status_code == 201, flavor.text
    listed = client.get("/console/backends").text
    assert "rayb" in listed and "ray-pool" in listed

    edit = client.get("/console/backends/rayb")
    version = version_of(edit.text)
    saved = client.post(
        "/console/backends/rayb/save",
        data={
            "csrf": csrf,
            "version": version,
            "kind": "ray",
            "settings": '{"url": "http://127.0.0.1:8266"}',
        },
        follow_redirects=False,
    )
    assert saved.status_code == 303, saved.text
    spec = client.get("/api/v1/admin/config/backends/rayb", headers=ADMIN).json()["spec"]
    assert spec["url"] == "http://127.0.0.1:8266"
    stale = client.post("/console/backends/rayb/delete", data={"csrf": csrf, "version": version})
    assert stale.status_code == 412
    now = version_of(client.get("/console/backends/rayb").text)
    blocked = client.post("/console/backends/rayb/delete", data={"csrf": csrf, "version": now})
    assert blocked.status_code == 409 and "Not deleted" in blocked.text
    assert "ray-pool" in blocked.text  # the API's reason: the flavor that runs on it
    assert client.get("/api/v1/admin/config/backends/rayb", headers=ADMIN).status_code == 200


def test_tenants_are_created_with_a_first_key_and_deleted_on_confirmation(
    client: TestClient[Any],
) -> None:
    sign_in(client, ADMIN_KEY)
    page = client.get("/console/tenants")
    assert 'data-testid="create-tenant"' in page.text
    csrf = csrf_of(page.text)
    made = client.post(
        "/console/tenant-create",
        data={
            "csrf": csrf,
            "name": "gamma",
            "display_name": "Gamma <team>",
            "queues": "team-a, team-b",
            "principal": "gamma-lead",
            "role": "tenant-admin",
        },
    )
    assert made.status_code == 200 and 'data-testid="new-token"' in made.text
    token = re.search(r'data-testid="new-token">([^<]+)<', made.text)
    assert token is not None
    tenant = client.get("/api/v1/admin/tenants/gamma", headers=ADMIN).json()["spec"]
    assert tenant["queues"] == ["team-a", "team-b"]
    keys = client.get("/api/v1/admin/tenants/gamma/keys", headers=ADMIN).json()
    assert [k["roles"] for k in keys] == [["tenant-admin"]]

    twice = client.post(
        "/console/tenant-create", data={"csrf": csrf, "name": "gamma", "queues": ""}
    )
    assert "Not created" in twice.text and "already exists" in twice.text
    unknown = client.post(
        "/console/tenant-create", data={"csrf": csrf, "name": "delta", "queues": "nope"}
    )
    assert "Not created" in unknown.text

    listed = client.get("/console/tenants")
    version = re.search(
        r'action="/console/tenants/gamma/delete".*?name="version" value="(\d+)"', listed.text, re.S
    )
    assert version is not None
    ask = {"csrf": csrf, "version": version.group(1)}
    unconfirmed = client.post("/console/tenants/gamma/delete", data={**ask, "confirm": "x"})
    assert "type the tenant's name" in unconfirmed.text
    assert client.get("/api/v1/admin/tenants/gamma", headers=ADMIN).status_code == 200
    # a version older than the one listed (someone changed it since): not deleted
    stale = {**ask, "version": str(int(version.group(1)) - 1), "confirm": "gamma"}
    assert "Not deleted" in client.post("/console/tenants/gamma/delete", data=stale).text
    assert client.get("/api/v1/admin/tenants/gamma", headers=ADMIN).status_code == 200
    deleted = client.post("/console/tenants/gamma/delete", data={**ask, "confirm": "gamma"})
    assert 'data-testid="saved"' in deleted.text and "gamma deleted" in deleted.text
    assert client.get("/api/v1/admin/tenants/gamma", headers=ADMIN).status_code == 404

    # a tenant with running work: the API's 409, and its reason, shown
    alpha = key(client, "alpha")
    running = submit(client, alpha, gang("holds", "team-a", 1, seconds=30))
    deadline = time.monotonic() + 15
    while state_of(client, alpha, running) not in ("admitted", "running"):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    try:
        alpha_version = client.get("/api/v1/admin/tenants/alpha", headers=ADMIN).json()["version"]
        blocked = client.post(
            "/console/tenants/alpha/delete",
            data={"csrf": csrf, "confirm": "alpha", "version": str(alpha_version)},
        )
        assert "Not deleted" in blocked.text and "running" in blocked.text
        assert client.get("/api/v1/admin/tenants/alpha", headers=ADMIN).status_code == 200
    finally:
        client.delete(f"/api/v1/workloads/{running}", headers=bearer(alpha))


def test_a_platform_admin_sees_every_tenants_workloads_a_tenant_admin_its_own(
    client: TestClient[Any],
) -> None:
    a = submit(client, key(client, "alpha"), gang("alpha-job", "team-a", 10))
    b = submit(client, key(client, "beta"), gang("beta-job", "team-b", 10))
    lead = key(client, "alpha", "tenant-admin")
    sign_in(client, ADMIN_KEY)
    every = client.get("/console/workloads")
    assert "alpha-job" in every.text and "beta-job" in every.text
    only = client.get("/console/workloads", params={"tenant": "beta", "state": "pending"})
    assert "beta-job" in only.text and "alpha-job" not in only.text
    by_queue = client.get("/console/workloads", params={"queue": "team-a"})
    assert "alpha-job" in by_queue.text and "beta-job" not in by_queue.text
    assert client.get("/console/workloads", params={"tenant": "<x>"}).status_code == 400
    assert a != b

    client.cookies.clear()
    sign_in(client, lead)
    own = client.get("/console/workloads", params={"tenant": "beta"})  # ignored: its own
    assert "alpha-job" in own.text and "beta-job" not in own.text


def test_every_new_change_needs_the_csrf_token(client: TestClient[Any]) -> None:
    sign_in(client, ADMIN_KEY)
    for path, data in [
        ("/console/queues/team-a/save", {"version": "1", "nominal-0-0-0": "99"}),
        ("/console/queues/team-a/preview", {"version": "1", "nominal-0-0-0": "99"}),
        ("/console/models/create", {"name": "m", "flavor": "h100", "endpoints": "http://a/v1"}),
        ("/console/models/delete", {"name": "m", "version": "1"}),
        ("/console/backends/create", {"name": "b", "kind": "ray", "settings": "{}"}),
        ("/console/backends/rayb/delete", {"version": "1"}),
        ("/console/tenant-create", {"name": "evil"}),
        ("/console/tenants/alpha/delete", {"confirm": "alpha"}),
        ("/console/keys", {"principal": "evil"}),
        ("/console/keys/abc123/revoke", {}),
        ("/console/keys/abc123/rotate", {"grace_seconds": "0"}),
        ("/console/keys/abc123/limits", {"tokens_per_minute": "1"}),
    ]:
        answer = client.post(path, data=data, follow_redirects=False)
        assert answer.status_code == 403, (path, answer.text)
        assert 'data-testid="csrf-refused"' in answer.text
    assert spec_nominal(client, "team-a") == 4
    assert client.get("/api/v1/admin/tenants/alpha", headers=ADMIN).status_code == 200


def test_a_console_address_with_a_parameter_out_of_shape_gets_a_page_not_json(
    client: TestClient[Any],
) -> None:
    sign_in(client, ADMIN_KEY)
    paths = (
        "/console/usage?month=2026-13x",
        "/console/usage?month=<script>",
        "/console/workloads/x",
    )
    for path in paths:
        answer = client.get(path)
        assert answer.status_code == 400, (path, answer.text)
        assert answer.headers["content-type"].startswith("text/html")
        assert 'data-testid="bad-request"' in answer.text
        assert "<script>" not in answer.text.split("</head>")[1]  # nothing echoed raw
    assert "month" in client.get("/console/usage?month=2026-13x").text  # names the parameter
    # the API keeps answering JSON
    api = client.get("/api/v1/usage?month=bad", headers=ADMIN)
    assert api.status_code in (400, 422) and api.headers["content-type"].startswith(
        "application/json"
    )


def test_a_month_with_no_usage_shows_no_empty_totals(client: TestClient[Any]) -> None:
    """Nothing used yet: the usage page and the dashboard's month say "none" in the
    table, with no empty card of totals above it."""
    sign_in(client, ADMIN_KEY)
    for path in ("/console/usage?month=2026-01", "/console/dashboard"):
        page = client.get(path).text
        assert 'data-testid="usage"' in page and ">none<" in page, path
        assert "<dl></dl>" not in page, path


def test_a_new_tenants_first_key_takes_its_token_limits(client: TestClient[Any]) -> None:
    """The first key made with a tenant carries the limits given; a limit that is no
    number (or one with no key to carry it) is refused before the tenant is made."""
    sign_in(client, ADMIN_KEY)
    csrf = csrf_of(client.get("/console/tenants").text)
    first = {"csrf": csrf, "queues": "team-a", "principal": "lead", "role": "tenant-admin"}
    wrong = client.post(
        "/console/tenant-create", data={**first, "name": "omega", "tokens_per_minute": "lots"}
    )
    assert "tokens per minute" in wrong.text and "not a whole number" in wrong.text
    keyless = client.post(
        "/console/tenant-create",
        data={"csrf": csrf, "name": "omega", "queues": "", "tokens_per_day": "5000"},
    )
    assert "need its principal and role" in keyless.text
    assert client.get("/api/v1/admin/tenants/omega", headers=ADMIN).status_code == 404
    made = client.post(
        "/console/tenant-create",
        data={**first, "name": "omega", "tokens_per_minute": "2,000", "tokens_per_day": ""},
    )
    assert made.status_code == 200 and 'data-testid="new-token"' in made.text, made.text
    (key,) = client.get("/api/v1/admin/tenants/omega/keys", headers=ADMIN).json()
    assert key["limits"] == {"tokens-per-minute": 2000}
