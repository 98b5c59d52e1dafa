"""What the Prometheus metrics cost a gateway per inference call, in instructions.

    PYTHONPATH=. .venv/bin/python bench/metrics_cost.py [--calls 400] [--concurrency 8]

Throughput on this shared machine swings by more than the 5% that issue 17 allows the
metrics, so this weighs them where noise cannot reach: two ``ignara serve`` processes
(IGNARA_METRICS=1 and =0, otherwise ``bench/proxy.py``'s setup: the same upstream, Redis
and config) each run under valgrind's callgrind, started uninstrumented; after a warm-up
with instrumentation on, the counters are zeroed before and dumped after ``--calls``
non-streaming chat completions and what they leave to do (usage records). The
gateway's own background work (the admission leader's passes) runs meanwhile, so it is
counted alone in a quiet window first and taken off at that rate. Prints one JSON
object: instructions per call with and without metrics and their ratio (the throughput
of a CPU-bound gateway goes as its inverse). Run on demand, never from tests; about ten
minutes on two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp

from bench.proxy import (
    MODEL,
    ROOT,
    Gateway,
    free_port,
    gateway,
    process,
    redis_url,
    wait_http,
)
from tests.policy.fake_opa_server import FakeOpaServer

VALGRIND = "/usr/bin/valgrind"
# Under callgrind everything runs some 50 times slower: the policy engine's time limit
# would refuse calls that are merely being counted. The gateway's own rounds (admission
# passes, reclaim, estimates, health checks) run on the wall clock, so under callgrind
# they would weigh fifty times their usual share: slowed down here, and what is left is
# counted alone first, in a quiet window, then taken off the calls' window at that rate.
# SETTLE_SECONDS lets what a burst of calls leaves behind (usage records) finish.
SLOW_ENOUGH = {
    "IGNARA_POLICY_TIMEOUT": "30",
    "IGNARA_ADMISSION_INTERVAL": "30",
    "IGNARA_RECLAIM_INTERVAL": "30",
    "IGNARA_ESTIMATE_INTERVAL": "300",
    "IGNARA_HEALTH_INTERVAL": "300",
}
IDLE_SECONDS = 20.0
SETTLE_SECONDS = 10.0
TOTALS = re.compile(r"^(?:totals|summary): (\d+)", re.MULTILINE)


def _callgrind(pid: int, *options: str) -> None:
    subprocess.run(["callgrind_control", *options, str(pid)], check=True, capture_output=True)


def _instructions(out_dir: Path, pid: int) -> int:
    """Instructions in the dumps callgrind wrote for ``pid`` so far (one per window)."""
    total = 0
    for dump in out_dir.glob(f"callgrind.{pid}.*"):
        found = TOTALS.search(dump.read_text(errors="replace"))
        if found:
            total += int(found.group(1))
        dump.unlink()
    return total


async def _calls(url: str, token: str, calls: int, concurrency: int) -> int:
    body = json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    ).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    remaining = calls
    failures = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal remaining, failures
        while remaining > 0:
            remaining -= 1
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                failures += response.status != 200

    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return failures


def _window(gw: Gateway, out_dir: Path, action: Any) -> tuple[int, float]:
    """Instructions the gateway runs while ``action()`` runs, and its wall seconds."""
    pid = gw.proc.popen.pid
    _instructions(out_dir, pid)  # drop whatever an earlier dump left
    _callgrind(pid, "--zero")
    started = time.monotonic()
    action()
    wall = time.monotonic() - started
    _callgrind(pid, "--dump")
    return _instructions(out_dir, pid), wall


def measure(gw: Gateway, out_dir: Path, calls: int, concurrency: int) -> dict[str, Any]:
    url = f"{gw.base_url}/v1/chat/completions"
    # Started uninstrumented (a quick start); counted code is instrumented code, and the
    # warm-up fills the caches (keys, policy decisions, code translated) before counting.
    _callgrind(gw.proc.popen.pid, "--instr=on")
    failures = asyncio.run(_calls(url, gw.token, max(20, calls // 4), concurrency))
    time.sleep(SETTLE_SECONDS)  # the warm-up's deferred work (usage records) done
    idle, idle_wall = _window(gw, out_dir, lambda: time.sleep(IDLE_SECONDS))
    counted: dict[str, int] = {}

    def serve() -> None:
        counted["failures"] = asyncio.run(_calls(url, gw.token, calls, concurrency))
        time.sleep(SETTLE_SECONDS)  # what the calls left to do is theirs to pay

    busy, wall = _window(gw, out_dir, serve)
    background = idle / idle_wall * wall
    return {
        "instructions_in_window": busy,
        "window_seconds": round(wall, 1),
        "idle_instructions_per_second": round(idle / idle_wall),
        "instructions_per_call": round((busy - background) / calls),
        "failures": failures + counted["failures"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    if not Path(VALGRIND).exists():
        print(f"bench/metrics_cost.py: needs {VALGRIND}", file=sys.stderr)
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="ignara-metrics-cost-"))
    report: dict[str, Any] = {"calls": args.calls, "concurrency": args.concurrency}
    try:
        with ExitStack() as stack:
            port = free_port()
            upstream_command = [sys.executable, str(ROOT / "bench" / "upstream.py")]
            upstream = stack.enter_context(
                process("upstream", [*upstream_command, "--port", str(port)], tmp / "up.log")
            )
            base = f"http://127.0.0.1:{port}"
            wait_http(upstream, f"{base}/v1/models", timeout=30)
            redis = stack.enter_context(redis_url())
            # valgrind cannot run the Go runtime of the embedded OPA engine (callgrind aborts
            # in it): the gateways ask an OPA REST server in this process instead, whose
            # decisions come from the same Go engine, outside what is counted.
            opa = FakeOpaServer().start()
            stack.callback(opa.stop)
            settings = {**SLOW_ENOUGH, "OPA_URL": opa.url}
            for metrics in (True, False):
                out_dir = tmp / ("on" if metrics else "off")
                out_dir.mkdir()
                wrapper = [
                    VALGRIND, "--tool=callgrind", "--instr-atstart=no",
                    f"--callgrind-out-file={out_dir}/callgrind.%p",
                ]  # fmt: skip
                with gateway(
                    tmp, base, redis, None, metrics=metrics, wrapper=wrapper,
                    start_timeout=600, extra_env=settings,
                ) as gw:  # fmt: skip
                    key = "metrics_on" if metrics else "metrics_off"
                    try:
                        report[key] = measure(gw, out_dir, args.calls, args.concurrency)
                    except aiohttp.ClientError as err:
                        print(f"{key}: {err!r}; the gateway said:", file=sys.stderr)
                        print(gw.proc.log_tail(), file=sys.stderr)
                        return 1
                    print(f"{key}: {report[key]}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    on = report["metrics_on"]["instructions_per_call"]
    off = report["metrics_off"]["instructions_per_call"]
    report["on_over_off"] = round(on / off, 4)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
