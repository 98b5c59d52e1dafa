"""The SVG charts that compare replays (``make replay``'s plots) and bench/replay.py
writing them beside the table."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from bench.replay import main as bench_replay
from quota.replay.metrics import summarize
from quota.replay.report import render_html, utilization_comparison_svg, waits_comparison_svg
from quota.replay.simulation import replay
from tests.quota.test_replay import FIXTURES, config, job

SVG = "{http://www.w3.org/2000/svg}"
BUCKETS = 50

# Team a (32 GPUs) runs a 32-GPU gang, then asks for 40: more than its quota, so it
# starts only by borrowing b's idle 8 GPUs (never, under static).
JOBS = [
    job(2, "a", 0, 4 * 3600, 32),
    job(3, "a", 60, 2 * 3600, 40),
    job(4, "b", 120, 3600, 4),
    job(5, "b", 180, 1800, 4),
    job(6, "b", 240, 600, 8),
]


def run(policy: str, **kwargs: Any) -> dict[str, Any]:
    return summarize(replay(config(policy, a=32, b=8), JOBS, **kwargs), buckets=BUCKETS)


@pytest.fixture(scope="module")
def runs() -> list[tuple[str, dict[str, Any]]]:
    return [("static x1", run("static")), ("cohort x1", run("cohort"))]


def parse(svg: str) -> ET.Element:
    """The document, checked to be one GitHub shows as an image: well-formed XML in
    the SVG namespace with its own size and white background, no script, no link,
    no stylesheet, every text with its font size."""
    root = ET.fromstring(svg)
    assert root.tag == SVG + "svg"
    assert float(root.attrib["width"]) > 0 and float(root.attrib["height"]) > 0
    background = root.find(SVG + "rect")
    assert background is not None and background.attrib["fill"] == "#fff"
    assert background.attrib["width"] == root.attrib["width"]
    for element in root.iter():
        assert element.tag.removeprefix(SVG) not in ("script", "style", "image", "a")
        assert not any("href" in name for name in element.attrib)
    texts = list(root.iter(SVG + "text"))
    assert texts and all("font-size" in t.attrib for t in texts)
    return root


def texts(root: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in root.iter(SVG + "text")]


def points(polyline: ET.Element) -> list[tuple[float, float]]:
    return [
        (float(x), float(y)) for x, y in (p.split(",") for p in polyline.attrib["points"].split())
    ]


def test_the_summaries_differ_as_the_charts_should_show(
    runs: list[tuple[str, dict[str, Any]]],
) -> None:
    static, cohort = (summary for _, summary in runs)
    assert static["big_gangs"]["never_started"] == 1  # the 40-GPU job, past a's quota
    assert cohort["big_gangs"]["never_started"] == 0
    assert max(static["series"]["used_gpus"]) <= 40 < max(cohort["series"]["used_gpus"]) + 1


def test_utilization_chart_draws_one_line_per_run_with_every_bucket(
    runs: list[tuple[str, dict[str, Any]]],
) -> None:
    root = parse(utilization_comparison_svg(runs, "GPUs in use: test"))
    words = texts(root)
    assert "GPUs in use: test" in words
    for label, _ in runs:
        assert any(label in text for text in words), label
    lines = root.findall(SVG + "polyline")
    assert len(lines) == 2
    assert [len(points(line)) for line in lines] == [BUCKETS, BUCKETS]
    # both start at the axis's left edge; the longer run (cohort: the 40-GPU job runs
    # once borrowing lets it) reaches its right edge
    width = float(root.attrib["width"])
    assert points(lines[0])[0][0] == points(lines[1])[0][0] == 48
    assert points(lines[0])[-1][0] < points(lines[1])[-1][0] == width - 48
    # the capacity (32 + 8 GPUs), dashed
    assert "capacity 40" in words
    dashed = [line for line in root.iter(SVG + "line") if "stroke-dasharray" in line.attrib]
    assert len(dashed) == 1
    # a run of a few hours: its ticks carry the hour
    assert "2017-10-01 00:00" in words


def test_a_run_cut_short_is_drawn_over_its_own_span(
    runs: list[tuple[str, dict[str, Any]]],
) -> None:
    ticks = iter(range(1000))
    short = run("cohort", timeout=4, wall_clock=lambda: float(next(ticks)))
    assert short["truncated"]
    _, full = runs[0]
    assert short["series"]["start"][-1] < full["series"]["start"][-1]
    root = parse(utilization_comparison_svg([("static", full), ("cohort", short)]))
    assert "\u25a0 cohort (cut short)" in texts(root)  # the legend says which
    whole, cut = (points(line) for line in root.findall(SVG + "polyline"))
    assert "cohort (cut short)" in texts(parse(waits_comparison_svg([("cohort", short)])))
    assert len(whole) == len(cut) == BUCKETS
    assert whole[0][0] == cut[0][0]  # both start at the first arrival
    assert cut[-1][0] < whole[-1][0]  # the cut run ends where it stopped
    # its last point sits where its span ends on the full run's axis
    scale = (whole[-1][0] - whole[0][0]) / full["series"]["start"][-1]
    assert cut[-1][0] - cut[0][0] == pytest.approx(short["series"]["start"][-1] * scale, abs=0.2)


def test_waits_chart_labels_every_bar_with_its_value(
    runs: list[tuple[str, dict[str, Any]]],
) -> None:
    root = parse(waits_comparison_svg(runs, "Queueing delay: test"))
    words = texts(root)
    for label, _ in runs:
        assert label in words
    static, cohort = (summary for _, summary in runs)
    # static: b's jobs never wait (4 + 4 + 8 of 8 GPUs, the 8 after the 4s end)...
    assert static["queueing_delay_s"]["max"] == pytest.approx(3600 - 240 + 120)
    # cohort: the 40-GPU job waits for the 32-GPU one (4 h from t=0, it came at 60 s)
    # and for b's 8 GPUs to be free
    assert cohort["big_gangs"]["longest_wait_s"] == pytest.approx(4 * 3600 - 60)
    assert "4.0 h" in words
    # static: the 40-GPU job never started; its wait is counted to the replay's end
    never = [w for w in words if w.endswith("(1 never started)")]
    assert len(never) == 1
    bars = [r for r in root.iter(SVG + "rect") if r.attrib.get("height") == "11"]
    assert len(bars) == 2 * 4  # mean, p95, p99 and the longest 32+ GPU wait per run
    # the legend names the four
    assert "\u25a0 longest wait of a 32+ GPU job" in words
    # a log axis with duration gridlines
    assert "1 h" in words


def test_a_value_label_is_the_formatted_duration() -> None:
    summary = {
        "queueing_delay_s": {"mean": 4 * 3600.0, "p95": 2 * 86400.0, "p99": 56 * 86400.0},
        "big_gangs": {"jobs": 3, "never_started": 0, "longest_wait_s": 90.0},
        "truncated": None,
    }
    root = parse(waits_comparison_svg([("x", summary)]))
    words = texts(root)
    assert {"4.0 h", "2.0 d", "56.0 d", "90 s"} <= set(words)
    widths = [
        float(r.attrib["width"]) for r in root.iter(SVG + "rect") if r.attrib["height"] == "11"
    ]
    # on the log axis the 4 h bar is still a visible fraction of the 56 d one
    assert 0 < widths[3] < widths[0] < widths[1] < widths[2]
    assert widths[0] > widths[2] / 5
    no_gang = {**summary, "big_gangs": {"jobs": 0, "never_started": 0, "longest_wait_s": None}}
    assert "no job of 32+ GPUs" in texts(parse(waits_comparison_svg([("x", no_gang)])))


def test_nothing_to_draw_is_still_a_document() -> None:
    assert "(no data)" in texts(parse(utilization_comparison_svg([])))
    assert "(no data)" in texts(parse(waits_comparison_svg([])))


def test_the_report_keeps_its_two_charts(runs: list[tuple[str, dict[str, Any]]]) -> None:
    page = render_html(runs[1][1])
    assert page.count("<svg") == 2
    assert "capacity 40" in page and "mean queueing delay" in page


def test_bench_replay_writes_the_charts_beside_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "replay"
    bench_replay(
        [
            "--trace", str(FIXTURES / "philly_sample.csv"),
            "--sizes", str(FIXTURES / "philly_vc_nodes.csv"),
            "--scales", "0.05,0.1", "--policies", "static,cohort", "--limit", "60",
            "--engine", "python", "--out", str(out),
        ]
    )  # fmt: skip
    err = capsys.readouterr().err
    for scale in ("0.05", "0.1"):
        for kind in ("utilization", "waits"):
            path = out / f"{kind}-x{scale}.svg"
            assert f"wrote {path}" in err
            words = texts(parse(path.read_text()))
            assert any(f"static x{scale}" in w for w in words)
            assert any(f"cohort x{scale}" in w for w in words)
            assert any(f"capacity x{scale}" in w for w in words)
    index = (out / "index.html").read_text()
    assert index.index("<table>") < index.index('<img src="utilization-x0.05.svg"')
    assert index.count("<img ") == 4
    assert (out / "table.md").read_text().count("| static x") == 2
