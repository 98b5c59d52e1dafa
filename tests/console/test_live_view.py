"""The dashboard's live usage, from ``GET /api/v1/admin/queues`` in the shape its README
documents (per queue: counts, the oldest pending, and per flavor and resource nominal,
usage, borrowed, lent): a row per level with a bar; no endpoint yet, a note; an unknown
shape, a note rather than an error."""

from __future__ import annotations

import re
from typing import Any

from gateway.console.api import Answer
from gateway.console.html import usage_bar
from gateway.console.pages import _live, cohort_tree


def level(flavor: str, nominal: float, usage: float, borrowed: float, lent: float) -> Any:
    return {
        "flavor": flavor,
        "resource": "nvidia.com/gpu",
        "nominal": nominal,
        "usage": usage,
        "borrowed": borrowed,
        "lent": lent,
        "borrowing_limit": None,
        "lending_limit": None,
    }


QUEUES = {
    "as_of": "2026-11-27T10:00:00Z",
    "source": "leader",
    "next_cursor": None,
    "items": [
        {
            "name": "team-a",
            "cohort": "research",
            "tenants": ["alpha"],
            "admitted": 3,
            "pending": 1,
            "oldest_pending": {"id": "0" * 32, "created_at": "2026-11-27T09:59:00Z"},
            "resources": [level("h100", 4.0, 6.0, 2.0, 0.0), level("a100", 4.0, 1.0, 0.0, 3.0)],
        },
        {
            "name": "<b>x</b>",
            "cohort": None,
            "tenants": [],
            "admitted": 0,
            "pending": 0,
            "oldest_pending": None,
            "resources": [],
        },
    ],
}


def test_each_queue_level_gets_a_row_and_a_bar() -> None:
    page = _live(Answer(200, QUEUES))
    rows = re.findall(r"<tr>(.*?)</tr>", page.split("<tbody>")[1])
    assert len(rows) == 3  # two levels of team-a, one empty row for the other queue
    assert "h100" in rows[0] and "6 / 4" in rows[0] and "a100" in rows[1] and "1 / 4" in rows[1]
    assert "<td>2</td><td>0</td>" in rows[0] and "<td>0</td><td>3</td>" in rows[1]
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    assert "2026-11-27 09:59:00" in page and "leader" in page


def test_the_bar_shows_borrowing_beyond_the_nominal_quota() -> None:
    bar = usage_bar(6.0, 4.0, 2.0)
    widths = [int(w) for w in re.findall(r'width="(\d+)" height="12" class', bar)]
    # 6 used of 4: the whole nominal track used, and 2 more borrowed past it
    assert widths == [int(160 * 4 / 6), int(160 * 4 / 6), int(160 * 2 / 6)]
    assert "6 / 4" in bar
    half = usage_bar(2, 4, 0)
    widths = [int(w) for w in re.findall(r'width="(\d+)" height="12" class', half)]
    assert widths == [160, 80, 0]


def test_no_endpoint_or_an_unknown_shape_is_a_note() -> None:
    assert "once this gateway serves" in _live(Answer(404, None))
    assert _live(Answer(404, None), quiet=True) == ""
    assert _live(Answer(403, {"error": {"message": "no"}}), quiet=True) == ""
    assert "does not know" in _live(Answer(200, [{"name": "q"}]))


def cohort(name: str, parent: str | None, usage: float, subtree: float) -> Any:
    return {
        "name": name,
        "parent": parent,
        "cohorts": [],
        "queues": [],
        "admitted": 1,
        "pending": 0,
        "oldest_pending": None,
        "resources": [level("h100", 0.0, usage, 0.0, 0.0) | {"subtree_nominal": subtree}],
    }


def test_the_cohort_tree_nests_cohorts_and_their_queues() -> None:
    cohorts = {
        "items": [cohort("research", "org", 6.0, 8.0), cohort("org", None, 6.0, 24.0)],
        "next_cursor": None,
    }
    page = cohort_tree(cohorts, QUEUES)
    # org holds research, which holds team-a; the queue of no cohort stands at the root;
    # a cohort links to its editor
    org, research = (
        page.index(f'<strong><a href="/console/cohorts/{n}">{n}</a></strong>')
        for n in ("org", "research")
    )
    # a queue links to its page (its quotas and their editor)
    team_a = page.index('<strong><a href="/console/queues/team-a">team-a</a></strong>')
    assert org < research < team_a
    assert page.index("</ul>", team_a) < page.index("&lt;b&gt;x&lt;/b&gt;")
    assert "6 / 24" in page and "6 / 8" in page  # usage against the subtree's quota
    assert page.count('data-testid="tree-cohort"') == 2
    assert page.count('data-testid="tree-queue"') == 2


def test_a_cycle_or_nothing_is_drawn_safely() -> None:
    looped = {"items": [cohort("a", "b", 0, 1), cohort("b", "a", 0, 1)]}
    assert "No cohorts" in cohort_tree(looped, None)  # no root: nothing to start from
    assert "No cohorts" in cohort_tree({"items": []}, {"items": []})
    assert "No cohorts" in cohort_tree(None, None)
