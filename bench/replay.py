"""`make replay`: the Philly trace under the three quota policies at two capacity
scales, one `ignara replay` process per run (so each one's peak memory is its own),
then the comparison table: printed, and written with links to every run's report,
and per scale two SVG charts comparing the policies (utilization-x{scale}.svg: GPUs in
use over time; waits-x{scale}.svg: queueing delay and the longest 32+ GPU job's wait),
shown in index.html under the table.

    python -m bench.replay --trace ../shared/data/traces/philly_2017_vc_jobs.csv \\
        --sizes ../shared/data/traces/philly_2017_vc_nodes.csv --out .artifacts/replay
"""

from __future__ import annotations

import argparse
import html
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import compile_engine
from quota.replay.report import (
    COMPARISON_COLUMNS,
    comparison_markdown,
    comparison_rows,
    utilization_comparison_svg,
    waits_comparison_svg,
)

POLICIES = ("static", "cohort", "cohort-fair")


Run = tuple[float, str, dict[str, Any], str]  # scale, label, summary, report link


def write_plots(out: Path, runs: Sequence[Run], trace: str) -> list[Path]:
    """The two comparison charts of each scale's runs, in ``out``."""
    written = []
    for scale in dict.fromkeys(scale for scale, _, _, _ in runs):
        same = [(label, summary) for at, label, summary, _ in runs if at == scale]
        gpus = "/".join(sorted({str(summary["capacity_gpus"]) for _, summary in same}))
        where = f"{Path(trace).name}, capacity x{scale:g} ({gpus} GPUs)"
        for path, svg in (
            (
                out / f"utilization-x{scale:g}.svg",
                utilization_comparison_svg(same, f"GPUs in use: {where}"),
            ),
            (
                out / f"waits-x{scale:g}.svg",
                waits_comparison_svg(same, f"Queueing delay (log scale): {where}"),
            ),
        ):
            path.write_text(svg, encoding="utf-8")
            written.append(path)
    return written


def write_index(out: Path, runs: Sequence[Run], plots: Sequence[Path], trace: str) -> None:
    """index.html: the comparison table, each run linked to its report, then the charts."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COMPARISON_COLUMNS)
    body = "".join(
        "<tr>"
        + f'<td><a href="{html.escape(link)}">{html.escape(row[0])}</a></td>'
        + "".join(f"<td>{html.escape(cell)}</td>" for cell in row[1:])
        + "</tr>"
        for row, (_, _, _, link) in zip(
            comparison_rows([(label, s) for _, label, s, _ in runs]), runs, strict=True
        )
    )
    images = "".join(
        f'<p><img src="{html.escape(path.name)}" alt="{html.escape(path.stem)}"></p>'
        for path in plots
    )
    (out / "index.html").write_text(
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Replay</title>'
        "<style>table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 8px}"
        f"img{{max-width:100%}}</style></head><body><h1>Replay: {html.escape(trace)}</h1>"
        f"<table><tr>{head}</tr>{body}</table>{images}</body></html>\n"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", required=True)
    parser.add_argument("--sizes", required=True, help="team sizes (Philly's vc,node num)")
    parser.add_argument("--out", default=".artifacts/replay")
    parser.add_argument("--scales", default="0.2,0.25", help="comma-separated capacity scales")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--timeout", type=float, default=None, help="wall seconds per run")
    parser.add_argument("--from", dest="start", default=None)
    parser.add_argument("--to", dest="end", default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument(
        "--engine",
        choices=("compiled", "python"),
        default="compiled",
        help="the engine built with mypyc (bench/compile_engine.py; the same decisions) "
        "or the Python modules",
    )
    parser.add_argument("--build", default=".artifacts/mypyc", help="where the build is kept")
    args = parser.parse_args(argv)
    out = Path(args.out)
    # -P: nothing before PYTHONPATH (``-m`` would put the working directory first).
    cli = [sys.executable, "-P", "-m", "gateway.cli"]
    env = dict(os.environ)
    paths = [str(compile_engine.ROOT), env.get("PYTHONPATH", "")]
    if args.engine == "compiled":
        print("building the compiled engine (mypyc; kept until quota/ changes)", file=sys.stderr)
        paths.insert(0, str(compile_engine.build(Path(args.build).resolve())))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    subprocess.run(
        [*cli, "replay-quotas", args.sizes, "--out", str(out / "quotas")], check=True, env=env
    )
    runs: list[Run] = []
    for scale in (float(s) for s in args.scales.split(",")):
        for policy in args.policies.split(","):
            name = f"{policy}-x{scale:g}"
            command = [
                *cli, "replay", args.trace, "--quota", str(out / "quotas" / f"{policy}.yaml"),
                "--policy", policy, "--capacity-scale", str(scale), "--out", str(out / name),
            ]  # fmt: skip
            for flag, value in (
                ("--timeout", args.timeout),
                ("--from", args.start),
                ("--to", args.end),
                ("--limit", args.limit),
            ):
                if value is not None:
                    command += [flag, str(value)]
            began = time.perf_counter()
            print(f"{name}: {' '.join(command[len(cli) :])}", file=sys.stderr, flush=True)
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
            print(f"{name}: {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
            summary = json.loads((out / name / "summary.json").read_text())
            if summary["run"].get("engine") != args.engine:
                raise SystemExit(f"{name} ran the {summary['run'].get('engine')} engine")
            runs.append((scale, f"{policy} x{scale:g}", summary, f"{name}/report.html"))
    table = comparison_markdown([(label, s) for _, label, s, _ in runs])
    (out / "table.md").write_text(table)
    plots = write_plots(out, runs, args.trace)
    write_index(out, runs, plots, args.trace)
    for path in (out / "table.md", out / "index.html", *plots):
        print(f"wrote {path}", file=sys.stderr)
    print(table, end="")


if __name__ == "__main__":
    main()
