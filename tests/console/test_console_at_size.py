"""The console with more queues than one page of the API: the dashboard pages its queue
tables by cursor (and its totals count every queue); the cohorts page draws every queue
of every cohort, however many pages of the API that takes."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.console import dashboard
from gateway.settings import Settings
from tests.conftest import ADMIN_KEY
from tests.console.test_console_http import csrf_of, sign_in

GPU = "nvidia.com/gpu"
QUEUES = [f"q-{i:02d}" for i in range(23)]
COHORTS = ["c-a", "c-b", "c-c"]


def _config() -> dict[str, Any]:
    return {
        "flavors": ["h100"],
        "cohorts": [{"name": "org"}] + [{"name": c, "parent": "org"} for c in COHORTS],
        "cluster_queues": [
            {
                "name": name,
                "cohort": COHORTS[i % len(COHORTS)],
                "resource_groups": [
                    {
                        "resources": [GPU],
                        "flavors": [{"name": "h100", "quotas": {GPU: {"nominal": i + 1}}}],
                    }
                ],
            }
            for i, name in enumerate(QUEUES)
        ],
        "tenants": [{"name": "alpha", "queues": QUEUES}],
    }


@pytest.fixture
def client(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient[Any]]:
    # Pages far smaller than the real ones, so two dozen queues take several.
    monkeypatch.setattr(dashboard, "PAGE", 5)
    monkeypatch.setattr(dashboard, "LIST_PAGE", 4)
    with TestClient(app=create_app(settings)) as client:
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
        answer = client.post("/api/v1/admin/config", json=_config(), headers=headers)
        assert answer.status_code == 201, answer.text
        assert sign_in(client, ADMIN_KEY).status_code == 303
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the leader's next pass takes the config in
            summary = client.get("/api/v1/admin/summary", headers=headers).json()
            if summary["queues"] == len(QUEUES):
                break
            time.sleep(0.1)
        yield client


def _queues_in(html: str, test_id: str) -> list[str]:
    """The queues linked in the table ``test_id`` of a page."""
    start = html.index(f'data-testid="{test_id}"')
    end = html.index("</table>", start)
    return re.findall(r'href="/console/queues/([^"]+)"', html[start:end])


def test_the_dashboard_pages_its_queues_by_cursor(client: TestClient[Any]) -> None:
    seen: list[str] = []
    path = "/console/dashboard"
    pages = 0
    while True:
        answer = client.get(path)
        assert answer.status_code == 200
        page = answer.text
        pages += 1
        quotas = list(dict.fromkeys(_queues_in(page, "quotas")))
        assert quotas == list(dict.fromkeys(_queues_in(page, "live")))  # the same queues
        assert 1 <= len(quotas) <= 5
        seen += quotas
        # every page counts every queue
        assert f'<span data-testid="queue-count">{len(QUEUES)}</span>' in page
        assert '<span data-testid="tenant-count">1</span>' in page
        found = re.search(r'href="(/console/dashboard\?cursor=[^"]+)" data-testid="next"', page)
        if found is None:
            break
        path = found.group(1).replace("&amp;", "&")
        # the page's script refreshes the same queues it shows
        live = client.get(path.replace("/dashboard?", "/dashboard/live?")).text
        assert _queues_in(live, "live")[0] > seen[-1]
    assert seen == QUEUES  # each once, in order, none left out
    assert pages == 5
    assert client.get("/console/dashboard?cursor=..bad").status_code == 400
    csrf_of(page)  # still a signed-in page


def test_the_cohorts_page_draws_every_queue(client: TestClient[Any]) -> None:
    page = client.get("/console/cohorts").text
    drawn = re.findall(
        r'<li class="queue" data-testid="tree-queue"><strong><a href="/console/queues/([^"]+)"',
        page,
    )
    assert sorted(drawn) == QUEUES  # more than four pages of four
    assert page.count('data-testid="tree-cohort"') == 1 + len(COHORTS)
    # each queue beneath its own cohort
    for i, name in enumerate(QUEUES):
        cohort = COHORTS[i % len(COHORTS)]
        at = page.index(f'href="/console/queues/{name}"')
        cohort_at = page.index(f'<strong><a href="/console/cohorts/{cohort}">')
        assert page.rindex('<strong><a href="/console/cohorts/c-', 0, at) == cohort_at
