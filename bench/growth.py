"""How the admission churn grows with tenfold workloads: in time and in instructions.

Plays ``bench/admission.py --preemption --completions`` at a small and a large size, each
run in a process of its own, alternating small and large ``--rounds`` times (a shared
machine drifts; runs side by side see the same machine), with the compiled engine unless
``--engine python``. Prints one JSON object: each pair's CPU seconds and ratio, the
median ratio, and the bound n log n allows (n: the workloads). With ``--instructions``,
each size once more under valgrind's callgrind, counting only inside the engine's three
calls (``QuotaEngine.schedule_once``, ``add``, ``finish``): free of the machine's noise
and of what a larger heap costs each instruction, but some 50 times slower (100,000
workloads on 1,000 queues take about 6 minutes).

    python -m bench.growth --small 10000:1000 --large 100000:1000 --rounds 3
    python -m bench.growth --small 10000:100 --large 100000:1000 --instructions
"""

from __future__ import annotations

import argparse
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

from bench import compile_engine

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
    workloads: int, queues: int, env: dict[str, str], prefix: Sequence[str] = ()
) -> dict[str, object]:
    command = [
        *prefix, sys.executable, "-P", "-m", "bench.admission", "--preemption", "--completions",
        "--workloads", str(workloads), "--queues", str(queues),
    ]  # fmt: skip
    done = subprocess.run(command, check=True, env=env, capture_output=True, text=True)
    figures: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def instructions(workloads: int, queues: int, env: dict[str, str]) -> int:
    """Instructions inside the engine's calls."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        toggles = [
            f"--toggle-collect=CPyDef_engine___QuotaEngine___{call}" for call in ENGINE_CALLS
        ]
        prefix = ["valgrind", "--tool=callgrind", *toggles, f"--callgrind-out-file={out}"]
        churn(workloads, queues, env, prefix)
        for line in out.read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise SystemExit("callgrind wrote no summary")


def same_decisions(runs: Sequence[dict[str, object]]) -> bool:
    return len({tuple(run[k] for k in DECISIONS) for run in runs}) == 1


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=size, default=(10_000, 1_000), help="WORKLOADS:QUEUES")
    parser.add_argument("--large", type=size, default=(100_000, 1_000), help="WORKLOADS:QUEUES")
    parser.add_argument("--rounds", type=int, default=3, help="pairs to play")
    parser.add_argument("--instructions", action="store_true", help="also count instructions")
    parser.add_argument("--engine", choices=("compiled", "python"), default="compiled")
    parser.add_argument("--build", default=".artifacts/mypyc", help="where the build is kept")
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

    small: tuple[int, int] = args.small
    large: tuple[int, int] = args.large
    runs: dict[str, list[dict[str, object]]] = {"small": [], "large": []}
    pairs = []
    for _ in range(args.rounds):
        runs["small"].append(churn(*small, env))
        runs["large"].append(churn(*large, env))
        cpu = [float(str(runs[k][-1]["drain_cpu_s"])) for k in ("small", "large")]
        pairs.append(
            {"small_cpu_s": cpu[0], "large_cpu_s": cpu[1], "ratio": round(cpu[1] / cpu[0], 2)}
        )
    result: dict[str, object] = {
        "small": {"workloads": small[0], "queues": small[1]},
        "large": {"workloads": large[0], "queues": large[1]},
        "engine": args.engine,
        "n_log_n": round(n_log_n(small[0], large[0]), 2),
        "time": {
            "pairs": pairs,
            "median_ratio": round(statistics.median(p["ratio"] for p in pairs), 2),
        },
        # The same decisions every round (the engine is deterministic; a difference is a bug).
        "same_decisions": same_decisions(runs["small"]) and same_decisions(runs["large"]),
        "decisions": {k: {d: v[0][d] for d in DECISIONS} for k, v in runs.items()},
    }
    if args.instructions:
        counted_small = instructions(*small, env)
        counted_large = instructions(*large, env)
        result["instructions"] = {
            "small": counted_small,
            "large": counted_large,
            "ratio": round(counted_large / counted_small, 2),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
