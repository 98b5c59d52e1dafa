"""Every value that enters a console page is escaped, and the pages hold no inline
script or style for the Content-Security-Policy to forbid."""

from __future__ import annotations

import re

from gateway.console.html import bar_chart, definition, esc, form, layout, table

HOSTILE = "<script>alert('x')</script>\" onmouseover=\"alert(1)"


def test_values_are_escaped_everywhere() -> None:
    page = layout(
        HOSTILE,
        table([HOSTILE], [[esc(HOSTILE)]])
        + bar_chart(HOSTILE, [(HOSTILE, "3"), ("b", "not a number")])
        + definition([(HOSTILE, esc(HOSTILE))])
        + form("/console/x", HOSTILE, "", button=HOSTILE),
        who=HOSTILE,
        csrf=HOSTILE,
        nav=[(HOSTILE, "/console/dashboard")],
    )
    assert "<script>alert" not in page and '" onmouseover="' not in page
    assert page.count("&lt;script&gt;") >= 8
    assert "<script" not in page.replace('<script src="/console/static/console.js" defer>', "")
    assert " style=" not in page and "<style" not in page


def test_bar_lengths_follow_the_values() -> None:
    chart = bar_chart("gpu-hours", [("alpha", "10"), ("beta", "5"), ("gamma", "0")])
    widths = [int(w) for w in re.findall(r'<rect [^>]*width="(\d+)"', chart)]
    assert widths[0] == 2 * widths[1] and widths[2] == 1  # the least bar still shows
    assert bar_chart("nothing", [("a", "n/a")]) == ""
