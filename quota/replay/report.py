"""The replay report: one self-contained HTML page (inline SVG, no script, no
CDN) per run, and the table that compares runs."""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

__all__ = ["COMPARISON_COLUMNS", "comparison_markdown", "comparison_rows", "render_html"]

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


def _line_chart(
    origin: datetime,
    xs: Sequence[float],
    lines: Sequence[tuple[str, Sequence[float], str]],
    ceiling: float,
    label: str,
) -> str:
    """Lines over time, with a dashed horizontal line at ``ceiling`` (capacity)."""
    if not xs:
        return "<p>(no data)</p>"
    top = max([ceiling, *(max(values, default=0.0) for _, values, _ in lines)]) or 1.0
    span = (xs[-1] - xs[0]) or 1.0
    inner_w, inner_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD

    def x(at: float) -> float:
        return PAD + (at - xs[0]) / span * inner_w

    def y(value: float) -> float:
        return PAD + inner_h - value / top * inner_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}"'
        f' role="img" aria-label="{_h(label)}">',
        f'<rect x="{PAD}" y="{PAD}" width="{inner_w}" height="{inner_h}" fill="#fafafa"'
        ' stroke="#ccc"/>',
    ]
    for i in range(5):
        value = top * i / 4
        parts.append(
            f'<text x="{PAD - 6}" y="{y(value) + 4:.1f}" font-size="11" text-anchor="end">'
            f"{value:.0f}</text>"
        )
    for i in range(6):
        at = xs[0] + span * i / 5
        day = (origin + timedelta(seconds=at)).strftime("%Y-%m-%d")
        parts.append(
            f'<text x="{x(at):.1f}" y="{HEIGHT - PAD + 16}" font-size="11"'
            f' text-anchor="middle">{day}</text>'
        )
    parts.append(
        f'<line x1="{PAD}" x2="{WIDTH - PAD}" y1="{y(ceiling):.1f}" y2="{y(ceiling):.1f}"'
        ' stroke="#555" stroke-dasharray="4 3"/>'
        f'<text x="{WIDTH - PAD}" y="{y(ceiling) - 4:.1f}" font-size="11"'
        f' text-anchor="end">capacity {ceiling:.0f}</text>'
    )
    for n, (name, values, color) in enumerate(lines):
        points = " ".join(f"{x(a):.1f},{y(v):.1f}" for a, v in zip(xs, values, strict=True))
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="1.2" points="{points}"/>'
        )
        parts.append(
            f'<text x="{PAD + 8 + 150 * n}" y="{PAD - 10}" font-size="12" fill="{color}">'
            f"&#9632; {_h(name)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _bar_chart(rows: Sequence[tuple[str, Sequence[float | None]]], legend: Sequence[str]) -> str:
    """Horizontal bars, one group per row (e.g. a team's mean and p95 wait, in hours)."""
    if not rows:
        return "<p>(no data)</p>"
    bar, gap, left = 10, 8, 90
    height = PAD + len(rows) * (len(legend) * bar + gap) + 10
    top = max((v or 0.0 for _, values in rows for v in values), default=0.0) or 1.0
    inner = WIDTH - left - PAD
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" role="img">']
    for n, name in enumerate(legend):
        parts.append(
            f'<text x="{left + 150 * n}" y="{PAD - 20}" font-size="12"'
            f' fill="{COLORS[n % len(COLORS)]}">&#9632; {_h(name)}</text>'
        )
    y = PAD
    for label, values in rows:
        parts.append(
            f'<text x="{left - 6}" y="{y + bar * len(values) / 2 + 4}" font-size="11"'
            f' text-anchor="end">{_h(label)}</text>'
        )
        for n, value in enumerate(values):
            length = (value or 0.0) / top * inner
            parts.append(
                f'<rect x="{left}" y="{y}" width="{length:.1f}" height="{bar - 1}"'
                f' fill="{COLORS[n % len(COLORS)]}"/>'
                f'<text x="{left + length + 4:.1f}" y="{y + bar - 2}" font-size="10">'
                f"{_duration(value * 3600 if value is not None else None)}</text>"
            )
            y += bar
        y += gap
    parts.append("</svg>")
    return "".join(parts)


def _distribution_cells(d: dict[str, Any]) -> str:
    return "".join(f"<td>{_duration(d.get(k))}</td>" for k in ("mean", "p50", "p95", "p99", "max"))


def render_html(summary: dict[str, Any], title: str = "") -> str:
    """The report of one replay's summary (see :func:`quota.replay.metrics.summarize`)."""
    origin = datetime.fromisoformat(summary["origin"])
    series = summary["series"]
    capacity = float(summary["capacity_gpus"])
    utilization = _line_chart(
        origin,
        series["start"],
        [
            ("GPUs in use", series["used_gpus"], COLORS[0]),
            ("of them borrowed", series["borrowed_gpus"], COLORS[1]),
        ],
        capacity,
        "GPU utilization over time",
    )
    teams = summary["teams"]
    bars = _bar_chart(
        [
            (
                team,
                [
                    None
                    if t["queueing_delay_s"]["mean"] is None
                    else t["queueing_delay_s"]["mean"] / 3600,
                    None
                    if t["queueing_delay_s"]["p95"] is None
                    else t["queueing_delay_s"]["p95"] / 3600,
                ],
            )
            for team, t in teams.items()
        ],
        ["mean queueing delay", "p95 queueing delay"],
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
        ("replay wall time (CPU time) / peak memory",
         f"{run['wall_seconds']:.1f} s ({run.get('cpu_seconds', 0.0):.1f} s)"
         f" / {run['peak_rss_mb']:.0f} MB"),
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
