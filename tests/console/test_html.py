"""Every value that enters a console page is escaped, and the pages hold no inline
script or style for the Content-Security-Policy to forbid."""

from __future__ import annotations

import re

from gateway.console.html import (
    bar_chart,
    definition,
    esc,
    form,
    layout,
    object_page,
    table,
    version_field,
)

HOSTILE = "<script>alert('x')</script>\" onmouseover=\"alert(1)"


def test_values_are_escaped_everywhere() -> None:
    page = layout(
        HOSTILE,
        table([HOSTILE], [[esc(HOSTILE)]])
        + bar_chart(HOSTILE, [(HOSTILE, "3"), ("b", "not a number")])
        + definition([(HOSTILE, esc(HOSTILE))])
        + form("/console/x", HOSTILE, "", button=HOSTILE)
        + object_page(
            HOSTILE, "", form("/console/x", "t", version_field(HOSTILE), button="Save"), ""
        ),
        who=HOSTILE,
        csrf=HOSTILE,
        nav=[(HOSTILE, "/console/dashboard")],
    )
    assert "<script>alert" not in page and '" onmouseover="' not in page
    assert page.count("&lt;script&gt;") >= 10
    assert "<script" not in page.replace('<script src="/console/static/console.js" defer>', "")
    assert " style=" not in page and "<style" not in page


def test_bar_lengths_follow_the_values() -> None:
    chart = bar_chart("gpu-hours", [("alpha", "10"), ("beta", "5"), ("gamma", "0")])
    widths = [int(w) for w in re.findall(r'<rect [^>]*width="(\d+)"', chart)]
    assert widths[0] == 2 * widths[1] and widths[2] == 1  # the least bar still shows
    assert bar_chart("nothing", [("a", "n/a")]) == ""


def test_an_object_page_shows_a_refusal_only_when_there_is_one() -> None:
    quiet = object_page("", "<p>about</p>", "<form>edit</form>", "<form>delete</form>")
    assert 'data-testid="form-error"' not in quiet
    assert quiet.index("about") < quiet.index("edit") < quiet.index("<h2>Delete</h2>")
    refused = object_page("stale", "<p>about</p>", "<form>edit</form>", "<form>delete</form>")
    assert refused.startswith('<div class="error" data-testid="form-error">stale</div>')
