"""How the admission churn grows with tenfold workloads: in time and in instructions.

Plays ``bench/admission.py --preemption --completions`` at a small and a large size, or
along a curve of sizes (``--sizes``), each run in a process of its own, every size once
per round for ``--rounds`` rounds (a shared machine drifts; runs side by side see the same
machine), with the compiled engine unless ``--engine python``. Prints one JSON object:
per size its CPU seconds and their median's cost per n log n (n: the workloads); per step
to the next size the ratio within each round, the median ratio, and the bound n log n
allows. A cost per n log n that rises at one step and is level on either side of it is a
step (a heap that outgrew a cache), not a rate of growth. With ``--instructions``, each
size once more under valgrind's callgrind, counting only inside the engine's three calls
(``QuotaEngine.schedule_once``, ``add``, ``finish``): free of the machine's noise and of
what a larger heap costs each instruction, but some 50 times slower (100,000 workloads on
1,000 queues take about 6 minutes).

    python -m bench.growth --small 10000:1000 --large 100000:1000 --rounds 3
    python -m bench.growth --small 10000:100 --large 100000:1000 --instructions
    python -m bench.growth --sizes 10000:100,100000:1000,1000000:10000
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench import compile_engine, huge_arenas

# The engine's three calls, as the compiled engine names them (callgrind counts inside).
ENGINE_CALLS = ("schedule_once", "add", "finish")
DECISIONS = ("cycles", "admitted", "preempted", "completed")


def size(text: str) -> tuple[int, int]:
    """``WORKLOADS:QUEUES``."""
    workloads, _, queues = text.partition(":")
    try:
        parsed = int(workloads), int(queues)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give WORKLOADS:QUEUES") from None
    if min(parsed) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: both must be positive")
    return parsed


def n_log_n(small: int, large: int) -> float:
    return large * math.log(large) / (small * math.log(small))


def churn(
    workloads: int,
    queues: int,
    env: dict[str, str],
    flags: Sequence[str] = (),
    prefix: Sequence[str] = (),
) -> dict[str, object]:
    command = [
        *prefix, sys.executable, "-P", "-m", "bench.admission", "--preemption", "--completions",
        "--workloads", str(workloads), "--queues", str(queues), *flags,
    ]  # fmt: skip
    done = subprocess.run(command, check=True, env=env, capture_output=True, text=True)
    figures: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def instructions(
    workloads: int, queues: int, env: dict[str, str], flags: Sequence[str] = ()
) -> int:
    """Instructions inside the engine's calls."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        toggles = [
            f"--toggle-collect=CPyDef_engine___QuotaEngine___{call}" for call in ENGINE_CALLS
        ]
        prefix = ["valgrind", "--tool=callgrind", *toggles, f"--callgrind-out-file={out}"]
        churn(workloads, queues, env, flags, prefix)
        for line in out.read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise SystemExit("callgrind wrote no summary")


def same_decisions(runs: Sequence[dict[str, object]]) -> bool:
    return len({tuple(run[k] for k in DECISIONS) for run in runs}) == 1


def sizes(text: str) -> list[tuple[int, int]]:
    """``WORKLOADS:QUEUES,WORKLOADS:QUEUES,...``: two or more, ascending workloads."""
    parsed = [size(part) for part in text.split(",")]
    if len(parsed) < 2 or any(a[0] >= b[0] for a, b in itertools.pairwise(parsed)):
        raise argparse.ArgumentTypeError(f"{text!r}: give two or more sizes, ascending workloads")
    return parsed


def label(point: tuple[int, int]) -> str:
    return f"{point[0]}:{point[1]}"


def curve(
    points: Sequence[tuple[int, int]], cpu: Sequence[Sequence[float]]
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Per size (``cpu``: its CPU seconds by round), the median's cost per n log n (n:
    the workloads); per step to the next size, the ratio within each round, their
    median, and n log n's."""
    points_out = []
    for (workloads, queues), seconds in zip(points, cpu, strict=True):
        median = statistics.median(seconds)
        points_out.append(
            {
                "workloads": workloads,
                "queues": queues,
                "cpu_s": list(seconds),
                "median_cpu_s": round(median, 3),
                "ns_per_n_log_n": round(median / (workloads * math.log(workloads)) * 1e9, 1),
            }
        )
    steps: list[dict[str, object]] = []
    for (a, b), (before, after) in zip(
        itertools.pairwise(points), itertools.pairwise(cpu), strict=True
    ):
        ratios = [round(large / small, 2) for small, large in zip(before, after, strict=True)]
        steps.append(
            {
                "from": label(a),
                "to": label(b),
                "n_log_n": round(n_log_n(a[0], b[0]), 2),
                "ratios": ratios,
                "median_ratio": statistics.median(ratios),
            }
        )
    return points_out, steps


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=size, default=(10_000, 1_000), help="WORKLOADS:QUEUES")
    parser.add_argument("--large", type=size, default=(100_000, 1_000), help="WORKLOADS:QUEUES")
    parser.add_argument(
        "--sizes", type=sizes, help="a curve instead: WORKLOADS:QUEUES,... (ascending)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="times to play every size")
    parser.add_argument("--instructions", action="store_true", help="also count instructions")
    parser.add_argument("--engine", choices=("compiled", "python"), default="compiled")
    parser.add_argument("--build", default=".artifacts/mypyc", help="where the build is kept")
    parser.add_argument(
        "--huge-page-arenas", action="store_true", help="every run with admission.py's"
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    if args.instructions and (args.engine != "compiled" or shutil.which("valgrind") is None):
        parser.error("--instructions needs valgrind and the compiled engine")
    env = dict(os.environ)
    paths = [str(compile_engine.ROOT), env.get("PYTHONPATH", "")]
    if args.engine == "compiled":
        paths.insert(0, str(compile_engine.build(Path(args.build).resolve())))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    flags: list[str] = []
    if args.huge_page_arenas:
        huge_arenas.build()  # once, before the runs
        flags.append("--huge-page-arenas")

    points: list[tuple[int, int]] = args.sizes or [args.small, args.large]
    runs: list[list[dict[str, object]]] = [[] for _ in points]
    for _ in range(args.rounds):
        # Every size once per round, side by side: a shared machine drifts.
        for point, played in zip(points, runs, strict=True):
            played.append(churn(*point, env, flags))
    cpu = [[float(str(run["drain_cpu_s"])) for run in played] for played in runs]
    points_out, steps = curve(points, cpu)
    result: dict[str, object] = {
        "engine": args.engine,
        "huge_page_arenas": args.huge_page_arenas,
        "sizes": points_out,
        "steps": steps,
        # The same decisions every round (the engine is deterministic; a difference is a bug).
        "same_decisions": all(same_decisions(played) for played in runs),
        "decisions": {
            label(point): {d: played[0][d] for d in DECISIONS}
            for point, played in zip(points, runs, strict=True)
        },
    }
    if args.instructions:
        counted = [instructions(*point, env, flags) for point in points]
        result["instructions"] = {
            "counts": {label(p): c for p, c in zip(points, counted, strict=True)},
            "ratios": [round(b / a, 2) for a, b in itertools.pairwise(counted)],
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
