"""The replay report: one self-contained HTML page (inline SVG, no script, no
CDN) per run, and the table and the SVG charts that compare runs."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "COMPARISON_COLUMNS",
    "comparison_markdown",
    "comparison_rows",
    "render_html",
    "utilization_comparison_svg",
    "waits_comparison_svg",
]

WIDTH, HEIGHT, PAD = 900, 260, 48
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


def _h(value: object) -> str:
    return html.escape(str(value), quote=True)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


# The charts are standalone SVG documents (xmlns, width and height, a white
# background, explicit font sizes; no script, CSS or web font) so that the same
# markup serves inline in a report and as a file that GitHub's README shows through
# an <img> tag, which ignores the page's styles.

Line = tuple[str, Sequence[float], Sequence[float], str]
"""A line over time: name, instants (seconds from the chart's origin), values, colour."""

Bar = tuple[float | None, str]
"""A bar: its length in seconds (None: no value, no bar) and the text after it."""

# Gridlines of a logarithmic duration axis, those within the data's range.
DURATION_TICKS = (
    (0.1, "0.1 s"),
    (1.0, "1 s"),
    (60.0, "1 min"),
    (600.0, "10 min"),
    (3600.0, "1 h"),
    (6 * 3600.0, "6 h"),
    (86400.0, "1 d"),
    (7 * 86400.0, "7 d"),
    (30 * 86400.0, "30 d"),
    (365 * 86400.0, "1 y"),
)


def _svg_open(width: float, height: float, label: str, title: str) -> str:
    heading = (
        f'<text x="8" y="18" font-size="14" font-weight="bold">{_h(title)}</text>' if title else ""
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}"'
        f' viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" role="img"'
        f' aria-label="{_h(label)}"><title>{_h(label)}</title>'
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="#fff"/>{heading}'
    )


def _legend(entries: Sequence[tuple[str, str]], x: float, y: float) -> str:
    """Coloured squares and names in a row, each as wide as its text is estimated to
    be (an SVG without a script has no font metrics)."""
    parts = []
    for name, color in entries:
        parts.append(
            f'<text x="{x:.0f}" y="{y:.0f}" font-size="12" fill="{color}">&#9632; {_h(name)}</text>'
        )
        x += 7 * len(name) + 30
    return "".join(parts)


def _no_data(label: str, title: str) -> str:
    return (
        _svg_open(WIDTH, 80, label, title)
        + f'<text x="{WIDTH // 2}" y="50" font-size="12" text-anchor="middle">(no data)</text>'
        "</svg>"
    )


def _round_step(top: float, most: int) -> float:
    """The round step (1, 2 or 5 times a power of ten) that cuts 0..``top`` in at
    most ``most`` intervals: axis ticks at 0, 200, 400, 600, not 0, 141, 282."""
    rough = top / most
    power = 10.0 ** math.floor(math.log10(rough))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= rough)


def _line_chart(
    origin: datetime,
    lines: Sequence[Line],
    ceilings: Sequence[float],
    label: str,
    title: str = "",
) -> str:
    """Lines over time, each over its own instants on an axis from the earliest to the
    latest of them, with a dashed horizontal line at each of ``ceilings`` (capacity)."""
    drawn = [line for line in lines if line[1]]
    if not drawn:
        return _no_data(label, title)
    first = min(xs[0] for _, xs, _, _ in drawn)
    span = (max(xs[-1] for _, xs, _, _ in drawn) - first) or 1.0
    highest = max([*ceilings, *(max(values, default=0.0) for _, _, values, _ in drawn)]) or 1.0
    step = _round_step(highest, 5)
    top = math.ceil(highest / step) * step
    inner_w, inner_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    # A window of a few days needs the hour to tell its ticks apart.
    when = "%Y-%m-%d" if span >= 3 * 86400 else "%Y-%m-%d %H:%M"

    def x(at: float) -> float:
        return PAD + (at - first) / span * inner_w

    def y(value: float) -> float:
        return PAD + inner_h - value / top * inner_h

    parts = [
        _svg_open(WIDTH, HEIGHT, label, title),
        f'<rect x="{PAD}" y="{PAD}" width="{inner_w}" height="{inner_h}" fill="#fafafa"'
        ' stroke="#ccc"/>',
    ]
    for i in range(round(top / step) + 1):
        value = i * step
        parts.append(
            f'<line x1="{PAD}" x2="{WIDTH - PAD}" y1="{y(value):.1f}" y2="{y(value):.1f}"'
            ' stroke="#e5e5e5"/>'
            f'<text x="{PAD - 6}" y="{y(value) + 4:.1f}" font-size="11" text-anchor="end">'
            f"{round(value, 6):g}</text>"
        )
    for i in range(6):
        at = first + span * i / 5
        day = (origin + timedelta(seconds=at)).strftime(when)
        parts.append(
            f'<text x="{x(at):.1f}" y="{HEIGHT - PAD + 16}" font-size="11"'
            f' text-anchor="middle">{day}</text>'
        )
    for ceiling in ceilings:
        parts.append(
            f'<line x1="{PAD}" x2="{WIDTH - PAD}" y1="{y(ceiling):.1f}" y2="{y(ceiling):.1f}"'
            ' stroke="#555" stroke-dasharray="4 3"/>'
            f'<text x="{WIDTH - PAD}" y="{y(ceiling) - 4:.1f}" font-size="11"'
            f' text-anchor="end">capacity {ceiling:.0f}</text>'
        )
    for n, (_, xs, values, color) in enumerate(drawn):
        points = " ".join(f"{x(a):.1f},{y(v):.1f}" for a, v in zip(xs, values, strict=True))
        # Each line is thinner than the one drawn before it, so that where two runs
        # held the same GPUs the first still shows on both sides of the second.
        width = 1.2 + 0.6 * (len(drawn) - 1 - n)
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="{width:g}" points="{points}"/>'
        )
    parts.append(_legend([(name, color) for name, _, _, color in drawn], PAD + 8, PAD - 10))
    parts.append("</svg>")
    return "".join(parts)


def _bar_chart(
    rows: Sequence[tuple[str, Sequence[Bar]]],
    legend: Sequence[str],
    label: str,
    *,
    log: bool = False,
    title: str = "",
) -> str:
    """Horizontal bars, one group per row (e.g. a team's mean and p95 wait), each
    followed by its text. On a ``log`` axis (with duration gridlines) a wait of hours
    stays visible beside one of weeks."""
    if not rows:
        return _no_data(label, title)
    bar, gap = 12, 10
    left = max(90, 7 * max(len(name) for name, _ in rows) + 16)
    inner = WIDTH - left - 170  # room on the right for the longest bar's text
    height = PAD + len(rows) * (len(legend) * bar + gap) + (26 if log else 6)
    positive = [v for _, bars in rows for v, _ in bars if v is not None and v > 0]
    top = max(positive, default=1.0)
    # The axis starts at the gridline at or below half the shortest bar, so that
    # every bar of a positive value has some length.
    least = min(positive, default=1.0) / 2
    bottom = max((t for t, _ in DURATION_TICKS if t <= least), default=DURATION_TICKS[0][0])
    ratio = math.log(top / bottom) if top > bottom else 1.0

    def length(value: float) -> float:
        if not log:
            return value / top * inner
        return 0.0 if value <= bottom else math.log(value / bottom) / ratio * inner

    parts = [
        _svg_open(WIDTH, height, label, title),
        _legend([(name, COLORS[n % len(COLORS)]) for n, name in enumerate(legend)], left, PAD - 16),
    ]
    if log:
        for at, name in DURATION_TICKS:
            if bottom <= at <= top:
                parts.append(
                    f'<line x1="{left + length(at):.1f}" x2="{left + length(at):.1f}"'
                    f' y1="{PAD - 6}" y2="{height - 20}" stroke="#ddd"/>'
                    f'<text x="{left + length(at):.1f}" y="{height - 8}" font-size="10"'
                    f' text-anchor="middle" fill="#555">{_h(name)}</text>'
                )
    y = PAD
    for name, bars in rows:
        parts.append(
            f'<text x="{left - 6}" y="{y + bar * len(bars) / 2 + 4}" font-size="12"'
            f' text-anchor="end">{_h(name)}</text>'
        )
        for n, (value, text) in enumerate(bars):
            size = length(value or 0.0)
            parts.append(
                f'<rect x="{left}" y="{y}" width="{size:.1f}" height="{bar - 1}"'
                f' fill="{COLORS[n % len(COLORS)]}"/>'
                f'<text x="{left + size + 4:.1f}" y="{y + bar - 2}" font-size="11">'
                f"{_h(text)}</text>"
            )
            y += bar
        y += gap
    parts.append("</svg>")
    return "".join(parts)


def _wait_bars(delay: dict[str, Any], keys: Sequence[str]) -> list[Bar]:
    return [(delay[k], _duration(delay[k])) for k in keys]


def _distribution_cells(d: dict[str, Any]) -> str:
    return "".join(f"<td>{_duration(d.get(k))}</td>" for k in ("mean", "p50", "p95", "p99", "max"))


def render_html(summary: dict[str, Any], title: str = "") -> str:
    """The report of one replay's summary (see :func:`quota.replay.metrics.summarize`)."""
    origin = datetime.fromisoformat(summary["origin"])
    series = summary["series"]
    capacity = float(summary["capacity_gpus"])
    xs = series["start"]
    utilization = _line_chart(
        origin,
        [
            ("GPUs in use", xs, series["used_gpus"], COLORS[0]),
            ("of them borrowed", xs, series["borrowed_gpus"], COLORS[1]),
        ],
        [capacity],
        "GPU utilization over time",
    )
    teams = summary["teams"]
    bars = _bar_chart(
        [(team, _wait_bars(t["queueing_delay_s"], ("mean", "p95"))) for team, t in teams.items()],
        ["mean queueing delay", "p95 queueing delay"],
        "Queueing delay per team",
    )
    team_rows = "".join(
        f"<tr><td>{_h(team)}</td><td>{t['nominal_gpus']}</td><td>{t['jobs']}</td>"
        f"<td>{t['completed']}</td><td>{t['never_started']}</td>"
        f"{_distribution_cells(t['queueing_delay_s'])}<td>{_duration(t['jct_s']['mean'])}</td>"
        f"<td>{_pct(t['waited_over_1h'])}</td>"
        f"<td>{t['reclaim']['needed_reclaim']}</td>"
        f"<td>{_duration(t['reclaim']['latency_s']['mean'])}</td>"
        f"<td>{_duration(t['reclaim']['latency_s']['max'])}</td>"
        f"<td>{t['gpu_hours_lost']:.1f}</td></tr>"
        for team, t in teams.items()
    )
    run = summary["run"]
    big = summary["big_gangs"]
    overview = [
        ("policy", summary["policy"]),
        ("capacity (sum of nominal quotas)", f"{summary['capacity_gpus']} GPUs"),
        ("arrival window", f"{summary['arrival_window']['from']} to "
                           f"{summary['arrival_window']['to']}"),
        ("simulated until", summary["simulated_until"]),
        ("stopped early", summary["truncated"] or "no"),
        ("jobs / completed / never started", f"{summary['jobs']} / {summary['completed']} / "
                                             f"{summary['never_started']}"),
        ("dropped (team has no queue)", summary["dropped_jobs"] or "none"),
        ("utilization (arrival window)", f"{_pct(summary['utilization']['mean'])} "
            f"({summary['utilization']['mean_gpus']:.0f} GPUs, "
            f"{summary['utilization']['borrowed_mean_gpus']:.0f} borrowed)"),
        ("queueing delay mean / p50 / p95 / p99",
         " / ".join(_duration(summary["queueing_delay_s"][k])
                    for k in ("mean", "p50", "p95", "p99"))),
        ("job completion time mean / p50 / p95",
         " / ".join(_duration(summary["jct_s"][k]) for k in ("mean", "p50", "p95"))),
        ("jobs that waited more than 1 h", _pct(summary["waited_over_1h"])),
        (f"jobs of 32+ GPUs: longest wait (never started of {big['jobs']})",
         f"{_duration(big['longest_wait_s'])} ({big['never_started']})"),
        ("reclaim: asks that needed lent quota back / never granted",
         f"{summary['reclaim']['needed_reclaim']} / {summary['reclaim']['never_granted']}"),
        ("reclaim latency mean / p95 / max",
         " / ".join(_duration(summary["reclaim"]["latency_s"][k])
                    for k in ("mean", "p95", "max"))),
        ("GPU-hours lost to preemption (preempted jobs)",
         f"{summary['gpu_hours_lost']:.1f} ({summary['preempted_jobs']})"),
        ("never started, by reason", summary["never_started_reasons"] or "none"),
        ("replay wall time (CPU time) / peak memory / engine",
         f"{run['wall_seconds']:.1f} s ({run.get('cpu_seconds', 0.0):.1f} s)"
         f" / {run['peak_rss_mb']:.0f} MB / {run.get('engine', 'python')}"),
        ("cycles / admissions / preemptions",
         f"{run['cycles']} / {run['admissions']} / {run['preemptions']}"),
    ]  # fmt: skip
    rows = "".join(f"<tr><th>{_h(k)}</th><td>{_h(v)}</td></tr>" for k, v in overview)
    heading = _h(title or f"Replay: {summary['policy']}")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{heading}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 1000px; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 13px; }}
th, td {{ border: 1px solid #ddd; padding: 3px 8px; text-align: left; }}
svg {{ width: 100%; height: auto; }}
</style></head><body>
<h1>{heading}</h1>
<table>{rows}</table>
<h2>GPU utilization over time</h2>
{utilization}
<h2>Queueing delay per team</h2>
{bars}
<h2>Per team</h2>
<table><tr><th>team</th><th>nominal GPUs</th><th>jobs</th><th>completed</th>
<th>never started</th><th>wait mean</th><th>p50</th><th>p95</th><th>p99</th><th>max</th>
<th>JCT mean</th><th>waited &gt; 1 h</th><th>reclaims needed</th><th>reclaim mean</th>
<th>reclaim max</th><th>GPU-h lost</th></tr>{team_rows}</table>
<p>Definitions: queueing delay is a job's total time pending (before its first run and
after each eviction), over completed jobs; percentiles are nearest-rank. Utilization is
GPUs held over the sum of nominal quotas, time-weighted over the arrival window.
Reclaim latency: a team asks for GPUs within its nominal quota while the cluster has no
free room, so only lent quota coming back can start them; the time until they start.
Quota only: the engine does not place jobs on nodes, so fragmentation is not modelled,
and an eviction frees its GPUs at once (no grace period).</p>
</body></html>
"""


COMPARISON_COLUMNS = (
    "run",
    "GPUs",
    "util",
    "wait mean",
    "p50",
    "p95",
    "p99",
    ">1 h",
    "JCT mean",
    "32+ GPU max wait",
    "never started",
    "reclaim mean/max",
    "GPU-h lost",
    "wall (CPU)",
    "peak MB",
    "note",
)


def comparison_rows(runs: Sequence[tuple[str, dict[str, Any]]]) -> list[list[str]]:
    rows = []
    for label, s in runs:
        delay, reclaim = s["queueing_delay_s"], s["reclaim"]["latency_s"]
        big = s["big_gangs"]
        rows.append(
            [
                label,
                str(s["capacity_gpus"]),
                _pct(s["utilization"]["mean"]),
                *(_duration(delay[k]) for k in ("mean", "p50", "p95", "p99")),
                _pct(s["waited_over_1h"]),
                _duration(s["jct_s"]["mean"]),
                f"{_duration(big['longest_wait_s'])}"
                + (f" ({big['never_started']} never)" if big["never_started"] else ""),
                str(s["never_started"]),
                f"{_duration(reclaim['mean'])}/{_duration(reclaim['max'])}"
                f" (n={s['reclaim']['needed_reclaim']})",
                f"{s['gpu_hours_lost']:.0f}",
                f"{s['run']['wall_seconds']:.0f} s ({s['run'].get('cpu_seconds', 0.0):.0f} s)",
                f"{s['run']['peak_rss_mb']:.0f}",
                f"cut short at {s['simulated_until'][:16]} with {s['jobs']} jobs"
                f" arrived: {s['truncated']}"
                if s["truncated"]
                else "",
            ]
        )
    return rows


def comparison_markdown(runs: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """A Markdown table comparing runs (label, summary), one row each."""
    lines = [
        "| " + " | ".join(COMPARISON_COLUMNS) + " |",
        "|" + "|".join("---" for _ in COMPARISON_COLUMNS) + "|",
    ]
    lines.extend("| " + " | ".join(row) + " |" for row in comparison_rows(runs))
    return "\n".join(lines) + "\n"


def _run_name(label: str, summary: dict[str, Any]) -> str:
    """A run's name in a chart, which says when the run stopped before its end (its
    waits then count only the jobs that completed by then)."""
    return f"{label} (cut short)" if summary["truncated"] else label


def utilization_comparison_svg(runs: Sequence[tuple[str, dict[str, Any]]], title: str = "") -> str:
    """An SVG document: GPUs in use over time, one line per run (label, summary), with
    the capacity dashed. Each run's series is drawn over its own span (a run stopped
    by its timeout ends early) on an axis from the earliest start to the latest end."""
    origins = [datetime.fromisoformat(summary["origin"]) for _, summary in runs]
    origin = min(origins, default=datetime.fromtimestamp(0, UTC))
    lines: list[Line] = []
    for n, ((label, summary), start) in enumerate(zip(runs, origins, strict=True)):
        series = summary["series"]
        shift = (start - origin).total_seconds()
        lines.append(
            (
                _run_name(label, summary),
                [shift + at for at in series["start"]],
                series["used_gpus"],
                COLORS[n % len(COLORS)],
            )
        )
    capacities = sorted({float(summary["capacity_gpus"]) for _, summary in runs})
    return _line_chart(origin, lines, capacities, "GPUs in use over time", title)


def waits_comparison_svg(runs: Sequence[tuple[str, dict[str, Any]]], title: str = "") -> str:
    """An SVG document: per run (label, summary), its queueing delay's mean, p95 and
    p99 and the longest wait of a job of 32+ GPUs (one that never started counts what
    it had waited), on a logarithmic axis, each bar followed by its value."""
    rows = []
    for label, summary in runs:
        big = summary["big_gangs"]
        longest = big["longest_wait_s"]
        if not big["jobs"]:
            text = "no job of 32+ GPUs"
        elif big["never_started"]:
            text = f"{_duration(longest)} ({big['never_started']} never started)"
        else:
            text = _duration(longest)
        rows.append(
            (
                _run_name(label, summary),
                [*_wait_bars(summary["queueing_delay_s"], ("mean", "p95", "p99")), (longest, text)],
            )
        )
    return _bar_chart(
        rows,
        [
            "mean queueing delay",
            "p95 queueing delay",
            "p99 queueing delay",
            "longest wait of a 32+ GPU job",
        ],
        "Queueing delay and the longest wait of a 32+ GPU job",
        log=True,
        title=title,
    )
