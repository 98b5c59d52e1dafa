"""Gateway benchmark: chat completions through the gateway, a bare proxy and straight upstream.

    python -m bench.proxy [--seconds 5] [--concurrency 1,32,64]
                          [--modes non-streaming,streaming]
                          [--targets direct,gateway,reference] [--json-only]

Starts a fast local OpenAI-compatible upstream (``bench/upstream.py``, its own
process), a bare reverse proxy on it (``bench/reference_proxy.py``: Litestar, aiohttp
client, uvicorn, nothing else), a Redis (the one ``REDIS_URL`` names, else a throwaway
``redis-server``), and the gateway (``ignara serve``, one worker) configured with one
tenant, one model on that upstream and token quotas far above what the run uses, so
every call passes authentication, the policy and the Redis quota check and is proxied.
Then, for each mode and concurrency, C workers on one aiohttp session loop request ->
response against the upstream (``direct``), the gateway (``gateway``) and the bare
proxy (``reference``); they are interleaved in slices (direct, gateway, reference,
reference, gateway, direct, ...) so the machine's noise hits all of them. Prints one
JSON object on stdout: req/s, latency p50/p99 and CPU ms per request of each process
for every target, the gateway's rps over the upstream's and the reference's, the
latency the gateway and the reference add, and the targets next to what was measured,
the rps targets also scaled by the reference measured in this run (``scaled_target``:
this machine's speed varies from day to day, a bare proxy's req/s here is the yardstick).
Progress goes to stderr.

The load generator, the upstream, the reference proxy, Redis and the gateway share this
machine's CPUs: compare ratios taken in one run, not absolute numbers across machines or
runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import secrets
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.redis import redis_server

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
MODEL = "bench-model"
TENANT = "bench"
REQUEST = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Say hello in five words."}],
    "max_tokens": 16,
}
TARGETS = {
    "non_streaming_rps_c32": 1500,
    "streaming_rps_c32": 800,
    "added_p50_ms_c1": 1.0,
}
# Req/s at C=32 of a bare "Litestar reverse proxy, aiohttp client, uvicorn" (what
# bench/reference_proxy.py is) on the machine where TARGETS were set: the team's notes,
# /work/shared/notes/gateway-performance.md. The rps targets are a fraction of these;
# applied to the reference proxy measured in a run they give targets for that run's
# machine ("scaled_target").
NOTES_REFERENCE_RPS = {"non-streaming": 3050, "streaming": 1600}
TARGET_NAMES = ("direct", "gateway", "reference", "gateway-nometrics")
DEFAULT_TARGETS = ("direct", "gateway", "reference")
SCALING_NOTE = (
    "this machine's speed varies from day to day, so the absolute rps targets are also "
    "given scaled: each is a fraction of what a bare Python proxy (Litestar, aiohttp "
    "client, uvicorn) did at C=32 on the machine where the targets were set "
    f"({NOTES_REFERENCE_RPS['non-streaming']} non-streaming, "
    f"{NOTES_REFERENCE_RPS['streaming']} streaming req/s); scaled_target is that fraction "
    "of the same bare proxy (target 'reference') measured in this run"
)
DONE = b"data: [DONE]"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

CONFIG = """\
flavors: [bench-pool]
cohorts: [{{name: org}}]
cluster_queues:
  - name: bench
    cohort: org
    resource_groups:
      - resources: [tokens-per-minute, requests-per-minute, tokens-per-day]
        flavors:
          - name: bench-pool
            quotas:
              tokens-per-minute: {{nominal: 1000000000}}
              requests-per-minute: {{nominal: 100000000}}
              tokens-per-day: {{nominal: 100000000000}}
tenants:
  - {{name: {tenant}, queues: [bench]}}
models:
  - name: {model}
    flavor: bench-pool
    endpoints: [{{base_url: "{upstream}/v1"}}]
"""


class BenchError(Exception):
    """Setup failed; the message says what was seen."""


_quiet = False


def log(message: str) -> None:
    if not _quiet:
        print(message, file=sys.stderr, flush=True)


# -- processes ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def random_string(length: int) -> str:
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(length))


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    # uvicorn re-raises the signal it stopped on once it has shut down: after SIGTERM
    # the process dies of it, after SIGINT a KeyboardInterrupt unwinds (and cProfile
    # writes its stats on the way out).
    stop_signal: int = signal.SIGTERM

    def cpu_seconds(self) -> float:
        """User + system CPU time of the process so far (Linux /proc), 0.0 if unknown."""
        try:
            stat = Path(f"/proc/{self.popen.pid}/stat").read_text()
        except OSError:
            return 0.0
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def main_thread_sched(self) -> tuple[float, float]:
        """Seconds the main thread has run, and waited for a CPU while runnable (Linux
        /proc schedstat); (0.0, 0.0) if unknown."""
        pid = self.popen.pid
        try:
            running, waiting, _ = Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()
        except (OSError, ValueError):
            return 0.0, 0.0
        return int(running) / 1e9, int(waiting) / 1e9

    def log_tail(self, chars: int = 6000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return text[-chars:] if text else "(empty)"


@contextmanager
def process(
    name: str,
    command: list[str],
    log_path: Path,
    stop_signal: int = signal.SIGTERM,
    **kwargs: Any,
) -> Iterator[Process]:
    with log_path.open("wb") as sink:
        popen = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, **kwargs)
    proc = Process(name, popen, log_path, stop_signal)
    try:
        yield proc
    finally:
        stop(proc)


def stop(proc: Process) -> None:
    if proc.popen.poll() is not None:
        return
    proc.popen.send_signal(proc.stop_signal)
    try:
        proc.popen.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.popen.kill()
        proc.popen.wait(timeout=10)


def wait_http(proc: Process, url: str, timeout: float = 60.0) -> None:
    """Poll ``url`` until it answers 200; fail with the process's output if it dies."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise BenchError(
                f"{proc.name} exited with {proc.popen.returncode} before {url} answered.\n"
                f"--- {proc.name} output ---\n{proc.log_tail()}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
                last = f"HTTP {response.status}"
        except urllib.error.HTTPError as err:
            last = f"HTTP {err.code}"
        except OSError as err:
            last = str(err)
        time.sleep(0.1)
    raise BenchError(
        f"{url} did not answer 200 within {timeout:.0f}s (last: {last}).\n"
        f"--- {proc.name} output ---\n{proc.log_tail()}"
    )


@contextmanager
def redis_url() -> Iterator[str]:
    """``REDIS_URL`` if set, else a throwaway redis-server (tests/support/redis.py's)."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    if shutil.which("redis-server") is None:
        raise BenchError("REDIS_URL is not set and redis-server is not installed")
    with redis_server() as url:
        yield url


def redis_stats(url: str) -> dict[str, float] | None:
    """Redis's counters so far: ``commands`` (those run inside Lua scripts included),
    ``scripts`` (EVAL/EVALSHA/FCALL calls) and ``cpu`` seconds; None if unreadable."""
    try:
        import redis

        client = redis.Redis.from_url(url, socket_timeout=2)
        try:
            info = client.info("all")
        finally:
            client.close()
        scripts = sum(
            info.get(f"cmdstat_{name}", {}).get("calls", 0)
            for name in ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro")
        )
        return {
            "commands": float(info["total_commands_processed"]),
            "scripts": float(scripts),
            "cpu": float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
        }
    except Exception:  # noqa: BLE001 - statistics, never a reason to fail the bench
        return None


# -- the gateway --------------------------------------------------------------------------


@dataclass
class Gateway:
    proc: Process
    base_url: str
    admin_key: str
    token: str = ""


@contextmanager
def gateway(
    tmp: Path,
    upstream: str,
    redis: str,
    profile: str | None,
    *,
    metrics: bool = True,
    wrapper: Sequence[str] = (),
    start_timeout: float = 60.0,
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[Gateway]:
    """``ignara serve`` on ``upstream``; ``metrics=False``: with IGNARA_METRICS=0 (the
    ``gateway-nometrics`` target, to weigh what the metrics cost in the same run);
    ``wrapper``: a command the gateway runs under (``bench/metrics_cost.py``'s valgrind),
    ``extra_env``: settings on top of the benchmark's own."""
    if not metrics:
        tmp = tmp / "nometrics"
        tmp.mkdir(exist_ok=True)
    config = tmp / "bench.yaml"
    config.write_text(CONFIG.format(tenant=TENANT, model=MODEL, upstream=upstream))
    port = free_port()
    admin_key = random_string(40)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("IGNARA_", "OIDC_")) and k not in ("DATABASE_URL", "OPA_URL")
    }
    env.update(
        DATABASE_URL=f"sqlite:///{tmp / 'bench.db'}",
        REDIS_URL=redis,
        IGNARA_ADMIN_KEY=admin_key,
        IGNARA_KEY_PEPPER=random_string(32),
        IGNARA_LOCAL_BACKEND_ROOT=str(tmp / "jobs"),
        IGNARA_KEY_PEPPER_FILE=str(tmp / "pepper"),
        IGNARA_LOG_LEVEL="warning",
        IGNARA_METRICS="1" if metrics else "0",
    )
    env.update(extra_env or {})
    serve = ["serve", "--config", str(config), "--port", str(port)]
    if profile:
        command = [sys.executable, "-m", "cProfile", "-o", profile, "-m", "gateway.cli", *serve]
    else:
        ignara = VENV_BIN / "ignara"
        command = (
            [str(ignara), *serve]
            if ignara.exists()
            else [sys.executable, "-m", "gateway.cli", *serve]
        )
    stop_signal = signal.SIGINT if profile else signal.SIGTERM
    log_path = tmp / "gateway.log"
    if wrapper:  # the interpreter itself, not the `ignara` script's shebang, runs under it
        command = [*wrapper, sys.executable, "-m", "gateway.cli", *serve]
    with process("gateway", command, log_path, stop_signal, env=env, cwd=tmp) as proc:
        base = f"http://127.0.0.1:{port}"
        wait_http(proc, f"{base}/healthz", timeout=start_timeout)
        gw = Gateway(proc, base, admin_key)
        gw.token = create_key(gw)
        yield gw


def create_key(gw: Gateway) -> str:
    body = json.dumps({"principal": "bench-bot", "roles": ["member"]}).encode()
    request = urllib.request.Request(
        f"{gw.base_url}/api/v1/admin/tenants/{TENANT}/keys",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {gw.admin_key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, answer = response.status, response.read()
    except urllib.error.HTTPError as err:
        status, answer = err.code, err.read()
    if status != 201:
        raise BenchError(
            f"creating an API key answered {status}: {answer.decode(errors='replace')}\n"
            f"--- gateway output ---\n{gw.proc.log_tail()}"
        )
    token: str = json.loads(answer)["token"]
    return token


# -- the reference proxy -----------------------------------------------------------------


@contextmanager
def reference(tmp: Path, upstream: str) -> Iterator[Target]:
    """``bench/reference_proxy.py`` on ``upstream``: a bare Litestar + aiohttp proxy."""
    port = free_port()
    script = ROOT / "bench" / "reference_proxy.py"
    command = [sys.executable, str(script), "--port", str(port), "--upstream", upstream]
    with process("reference", command, tmp / "reference.log", cwd=tmp) as proc:
        base = f"http://127.0.0.1:{port}"
        wait_http(proc, f"{base}/v1/models", timeout=30)
        log(f"reference proxy on {base}")
        yield Target(
            "reference",
            f"{base}/v1/chat/completions",
            {"Content-Type": "application/json"},
            proc,
        )


# -- checking the first answers -----------------------------------------------------------


def _events(body: bytes) -> list[Any]:
    """The JSON of each ``data:`` event of an SSE body (``[DONE]`` kept as a string)."""
    out: list[Any] = []
    for line in body.replace(b"\r\n", b"\n").split(b"\n"):
        if line.startswith(b"data:"):
            data = line[5:].strip()
            out.append("[DONE]" if data == b"[DONE]" else json.loads(data))
    return out


async def post(
    session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]
) -> tuple[int, str, bytes]:
    async with session.post(url, data=body, headers=headers) as response:
        return response.status, response.headers.get("Content-Type", ""), await response.read()


async def verify(session: aiohttp.ClientSession, direct: Target, proxy: Target) -> None:
    """A proxy's (gateway's, reference's) first answers must be 200 and what the upstream
    sent."""
    name = proxy.name
    for streaming in (False, True):
        what = "streaming" if streaming else "non-streaming"
        body = direct.body(streaming)
        status, _, expected = await post(session, direct.url, body, direct.headers)
        if status != 200:
            raise BenchError(f"upstream {what} answered {status}: {expected!r}")
        status, ctype, got = await post(session, proxy.url, body, proxy.headers)
        problem = None
        if status != 200:
            problem = f"answered {status}"
        elif not streaming:
            try:
                same = json.loads(got) == json.loads(expected)
            except ValueError:
                same = False
            if not same:
                problem = "answered 200 with a body other than the upstream's"
        else:
            problem = _stream_problem(ctype, got, expected)
        if problem:
            tail = proxy.proc.log_tail() if proxy.proc else "(not started by the bench)"
            raise BenchError(
                f"{name} {what} {problem}.\n"
                f"--- {name} answer ({status}, {ctype}) ---\n{got.decode(errors='replace')}\n"
                f"--- upstream answer ---\n{expected.decode(errors='replace')}\n"
                f"--- {name} output ---\n{tail}"
            )
        log(f"checked: {name} {what} answer is 200 and the upstream's")


def _stream_problem(ctype: str, got: bytes, expected: bytes) -> str | None:
    if not ctype.startswith("text/event-stream"):
        return f"answered 200 with Content-Type {ctype!r}, not text/event-stream"
    if not got.rstrip().endswith(DONE):
        return "answered a stream that does not end with 'data: [DONE]'"
    try:
        got_events = [e for e in _events(got) if e != "[DONE]" and e.get("choices")]
    except ValueError:
        return "answered a stream with an event that is not JSON"
    want = [e for e in _events(expected) if e != "[DONE]" and e.get("choices")]
    if got_events != want:
        return "answered a stream whose chunks are not the upstream's"
    return None


# -- the load generator -------------------------------------------------------------------


@dataclass
class Target:
    name: str
    url: str
    headers: dict[str, str]
    proc: Process | None = None  # the process that answers (CPU is read from it)

    def body(self, streaming: bool) -> bytes:
        request = dict(REQUEST, stream=True) if streaming else REQUEST
        return json.dumps(request).encode()


@dataclass
class Slice:
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None
    cpu: dict[str, float] = field(default_factory=dict)
    # Per process, the main thread's seconds running and waiting for a CPU.
    sched: dict[str, tuple[float, float]] = field(default_factory=dict)
    redis: dict[str, float] | None = None


async def run_slice(
    session: aiohttp.ClientSession,
    target: Target,
    streaming: bool,
    concurrency: int,
    warmup: float,
    seconds: float,
    watch: dict[str, Process],
    redis: str | None,
) -> Slice:
    """C workers loop request -> response for ``warmup + seconds``; what ends within
    the last ``seconds`` is measured, with the CPU of the ``watch`` processes, this
    process ("client") and, given its URL, Redis over the same window."""
    url, headers, body = target.url, target.headers, target.body(streaming)
    out = Slice()
    start = time.perf_counter()
    t0, t1 = start + warmup, start + warmup + seconds
    cpu0: dict[str, float] = {}

    async def worker() -> None:
        latencies = out.latencies
        while True:
            began = time.perf_counter()
            if began >= t1:
                return
            error = None
            try:
                async with session.post(url, data=body, headers=headers) as response:
                    answer = await response.read()
                    if response.status != 200:
                        error = f"HTTP {response.status}: {answer[:300]!r}"
                    elif streaming and not answer.rstrip().endswith(DONE):
                        error = f"stream without [DONE]: {answer[-300:]!r}"
            except (TimeoutError, aiohttp.ClientError) as err:
                error = f"{type(err).__name__}: {err}"
                await asyncio.sleep(0.01)
            ended = time.perf_counter()
            if t0 <= ended <= t1:
                if error is None:
                    latencies.append(ended - began)
                else:
                    out.errors += 1
                    out.first_error = out.first_error or error

    async def meter() -> None:
        nonlocal cpu0
        await asyncio.sleep(max(0.0, t0 - time.perf_counter()))
        cpu0 = {name: p.cpu_seconds() for name, p in watch.items()}
        cpu0["client"] = time.process_time()
        sched0 = {name: p.main_thread_sched() for name, p in watch.items()}
        redis0 = await asyncio.to_thread(redis_stats, redis) if redis else None
        await asyncio.sleep(max(0.0, t1 - time.perf_counter()))
        cpu1 = {name: p.cpu_seconds() for name, p in watch.items()}
        cpu1["client"] = time.process_time()
        sched1 = {name: p.main_thread_sched() for name, p in watch.items()}
        out.sched = {
            name: (sched1[name][0] - sched0[name][0], sched1[name][1] - sched0[name][1])
            for name in sched1
        }
        redis1 = await asyncio.to_thread(redis_stats, redis) if redis else None
        out.cpu = {name: cpu1[name] - cpu0[name] for name in cpu1}
        if redis0 is not None and redis1 is not None:
            out.redis = {k: redis1[k] - redis0[k] for k in redis1}
            out.redis["commands"] -= 1  # less meter()'s own INFO
            out.cpu["redis"] = out.redis["cpu"]

    await asyncio.gather(meter(), *(worker() for _ in range(concurrency)))
    out.seconds = seconds
    return out


def percentile(ordered: list[float], p: float) -> float | None:
    if not ordered:
        return None
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def summarize(slices: list[Slice]) -> dict[str, Any]:
    seconds = sum(s.seconds for s in slices)
    latencies = sorted(x for s in slices for x in s.latencies)
    n = len(latencies)
    cpu: dict[str, float] = {}
    for s in slices:
        for name, used in s.cpu.items():
            cpu[name] = cpu.get(name, 0.0) + used
    redis_used = [s.redis for s in slices]
    sched: dict[str, list[float]] = {}
    for s in slices:
        for name, (running, waiting) in s.sched.items():
            sums = sched.setdefault(name, [0.0, 0.0])
            sums[0] += running
            sums[1] += waiting
    first_error = next((s.first_error for s in slices if s.first_error), None)
    out: dict[str, Any] = {
        "rps": round(n / seconds, 1) if seconds else None,
        "p50_ms": _ms(percentile(latencies, 50)),
        "p99_ms": _ms(percentile(latencies, 99)),
        "mean_ms": _ms(sum(latencies) / n) if n else None,
        "requests": n,
        "errors": sum(s.errors for s in slices),
        "cpu_ms_per_request": {k: round(v * 1000 / n, 3) for k, v in cpu.items()} if n else {},
        "cpu_busy_fraction": {k: round(v / seconds, 2) for k, v in cpu.items()},
        # Of the measured time, how much each server's event loop thread spent running,
        # waiting for a CPU (the machine is oversubscribed) and idle: "idle" near 0
        # means that process was the bottleneck.
        "main_thread": {
            name: {
                "running": round(running / seconds, 2),
                "waiting_for_cpu": round(waiting / seconds, 2),
                "idle": round(max(0.0, 1 - (running + waiting) / seconds), 2),
            }
            for name, (running, waiting) in sched.items()
        },
    }
    if n and all(redis_used) and any(r["scripts"] for r in redis_used if r):
        for key in ("scripts", "commands"):
            total = sum(r[key] for r in redis_used if r)
            out[f"redis_{key}_per_request"] = round(total / n, 2)
    if first_error:
        out["first_error"] = first_error
    return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


async def run_cell(
    session: aiohttp.ClientSession,
    targets: list[Target],
    streaming: bool,
    concurrency: int,
    args: argparse.Namespace,
    watch: dict[str, Process],
    redis: str,
) -> dict[str, Any]:
    mode = "streaming" if streaming else "non-streaming"
    slices: dict[str, list[Slice]] = {t.name: [] for t in targets}
    per_slice = args.seconds / args.rounds
    for round_ in range(args.rounds):
        order = targets if round_ % 2 == 0 else targets[::-1]
        for target in order:
            # A proxy's own work (gateway, reference) is only measured when it is the
            # target (the gateway has background tasks), and so is Redis (only the gateway
            # uses it); the upstream answers every target.
            s = await run_slice(
                session,
                target,
                streaming,
                concurrency,
                args.warmup,
                per_slice,
                {k: v for k, v in watch.items() if k in ("upstream", target.name)},
                redis if target.name.startswith("gateway") else None,
            )
            slices[target.name].append(s)
            log(
                f"  {mode:>13} C={concurrency:<3} {target.name:>9} round {round_ + 1}: "
                f"{len(s.latencies) / per_slice:8.0f} req/s, errors {s.errors}"
            )
    cell: dict[str, Any] = {"mode": mode, "concurrency": concurrency}
    for name, got in slices.items():
        cell[name] = summarize(got)
    direct, gw, ref = cell.get("direct"), cell.get("gateway"), cell.get("reference")
    if direct and gw and direct["rps"] and gw["rps"] is not None:
        cell["gateway_over_direct_rps"] = round(gw["rps"] / direct["rps"], 3)
    bare = cell.get("gateway-nometrics")
    if gw and bare and bare["rps"]:
        cell["metrics_on_over_off_rps"] = round(gw["rps"] / bare["rps"], 3)
    if direct and gw and direct["p50_ms"] is not None and gw["p50_ms"] is not None:
        cell["added_p50_ms"] = round(gw["p50_ms"] - direct["p50_ms"], 3)
        cell["added_p99_ms"] = round(gw["p99_ms"] - direct["p99_ms"], 3)
    if gw and ref and ref["rps"] and gw["rps"] is not None:
        cell["gateway_over_reference_rps"] = round(gw["rps"] / ref["rps"], 3)
    if direct and ref and direct["p50_ms"] is not None and ref["p50_ms"] is not None:
        cell["reference_added_p50_ms"] = round(ref["p50_ms"] - direct["p50_ms"], 3)
    return cell


def verdict(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Each target next to what this run measured; ``met`` is None when the run did not
    measure it, and False whenever the gateway answered an error in that cell.

    With the reference proxy measured, the rps targets also get ``scaled_target``: the
    target times the reference's rps in that cell over ``NOTES_REFERENCE_RPS`` (what a
    bare proxy did where the targets were set), and ``met_scaled`` (None unmeasured,
    False on any error of the gateway or the reference in that cell); the latency
    target gets ``reference_added_p50_ms``, what a bare proxy adds in the same cell."""
    checks = {
        "non_streaming_rps_c32": ("non-streaming", 32, "rps", ">="),
        "streaming_rps_c32": ("streaming", 32, "rps", ">="),
        "added_p50_ms_c1": ("non-streaming", 1, "added_p50_ms", "<"),
    }
    out: dict[str, Any] = {}
    for key, (mode, concurrency, field_, op) in checks.items():
        target = TARGETS[key]
        cell = next(
            (r for r in results if r["mode"] == mode and r["concurrency"] == concurrency), None
        )
        gw = (cell or {}).get("gateway")
        value = None
        if cell is not None and gw is not None:
            value = gw.get(field_) if field_ == "rps" else cell.get(field_)
        met = None
        if value is not None and gw is not None:
            met = (value >= target if op == ">=" else value < target) and not gw["errors"]
        out[key] = {"target": f"{op} {target}", "measured": value, "met": met}
        ref = (cell or {}).get("reference")
        if field_ == "rps":
            out[key].update(_scaled(target, NOTES_REFERENCE_RPS[mode], value, gw, ref))
        else:
            out[key]["reference_added_p50_ms"] = (cell or {}).get("reference_added_p50_ms")
    return out


def _scaled(
    target: float,
    notes_rps: float,
    value: float | None,
    gw: dict[str, Any] | None,
    ref: dict[str, Any] | None,
) -> dict[str, Any]:
    """An rps target as the same fraction of this run's reference proxy as it is of the
    reference in the notes."""
    reference_rps = ref.get("rps") if ref else None
    if reference_rps is None:
        return {"reference_rps": None, "scaled_target": None, "met_scaled": None}
    scaled = round(target * reference_rps / notes_rps, 1)
    met_scaled = None
    if value is not None and gw is not None and ref is not None:
        met_scaled = value >= scaled and not gw["errors"] and not ref["errors"]
    return {"reference_rps": reference_rps, "scaled_target": scaled, "met_scaled": met_scaled}


async def bench(args: argparse.Namespace, targets: list[Target], redis: str) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(
        limit=2 * max(args.concurrency) + 8,
        limit_per_host=0,
        keepalive_timeout=60,
        force_close=False,
        ttl_dns_cache=None,
    )
    timeout = aiohttp.ClientTimeout(total=60)
    watch = {t.name if t.name != "direct" else "upstream": t.proc for t in targets if t.proc}
    async with aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        auto_decompress=False,
        skip_auto_headers=["User-Agent"],
    ) as session:
        direct = next(t for t in targets if t.name == "direct")
        for proxy in targets:
            if proxy is not direct:
                await verify(session, direct, proxy)
        # One unmeasured run of each target and mode first: the first seconds of a fresh
        # process (imports, caches, pools, policy compilation) are not its steady state.
        for mode in args.modes:
            for target in targets:
                await run_slice(
                    session,
                    target,
                    mode == "streaming",
                    min(32, max(args.concurrency)),
                    args.initial_warmup,
                    0.001,
                    {},
                    None,
                )
        log(f"warmed up ({args.initial_warmup:g}s per target and mode)")
        results = []
        for mode in args.modes:
            for c in args.concurrency:
                results.append(
                    await run_cell(session, targets, mode == "streaming", c, args, watch, redis)
                )
    return {"results": results, "targets": verdict(results)}


# -- main ---------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": affinity,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "aiohttp": aiohttp.__version__,
        "loadavg_at_start": load,
        "note": (
            "the load generator (this process), the upstream, Redis and the gateway all "
            "share this machine's CPUs; compare ratios within one run"
        ),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per target")
    parser.add_argument("--warmup", type=float, default=0.5, help="unmeasured seconds per slice")
    parser.add_argument(
        "--initial-warmup",
        type=float,
        default=1.5,
        help="unmeasured seconds per target and mode before the first cell",
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="slices per target, interleaved with the other"
    )
    parser.add_argument("--concurrency", default="1,32,64", help="comma-separated levels")
    parser.add_argument("--modes", default="non-streaming,streaming")
    parser.add_argument(
        "--targets",
        default=",".join(DEFAULT_TARGETS),
        help="any of direct,gateway,reference,gateway-nometrics; direct is required",
    )
    parser.add_argument("--json-only", action="store_true", help="no progress lines on stderr")
    parser.add_argument(
        "--keep-tmp",
        action="store_true",
        help="keep the temporary directory (config, SQLite database, process logs)",
    )
    parser.add_argument(
        "--profile-gateway",
        metavar="PATH",
        help="run the gateway under cProfile, write its stats to PATH, print the top entries",
    )
    args = parser.parse_args(argv)
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c.strip()]
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if not args.concurrency or min(args.concurrency) < 1:
        parser.error("--concurrency: positive integers")
    if not set(args.modes) <= {"non-streaming", "streaming"} or not args.modes:
        parser.error("--modes: non-streaming and/or streaming")
    if "direct" not in args.targets or not set(args.targets) <= set(TARGET_NAMES):
        parser.error("--targets: direct, and any of gateway,reference")
    if args.rounds < 1 or args.seconds <= 0:
        parser.error("--rounds >= 1 and --seconds > 0")
    if args.profile_gateway:  # the gateway runs in the temporary directory
        args.profile_gateway = str(Path(args.profile_gateway).resolve())
    return args


def main(argv: list[str] | None = None) -> int:
    global _quiet
    args = parse_args(argv)
    _quiet = args.json_only
    report: dict[str, Any] = {
        "machine": machine(),
        "seconds": args.seconds,
        "rounds": args.rounds,
        "warmup_seconds": args.warmup,
        "initial_warmup_seconds": args.initial_warmup,
    }
    try:
        import uvloop

        uvloop.install()
        report["machine"]["load_generator_loop"] = "uvloop"
    except ImportError:
        report["machine"]["load_generator_loop"] = "asyncio"
    tmp = Path(tempfile.mkdtemp(prefix="ignara-bench-"))
    try:
        with ExitStack() as stack:
            port = free_port()
            upstream = stack.enter_context(
                process(
                    "upstream",
                    [sys.executable, str(ROOT / "bench" / "upstream.py"), "--port", str(port)],
                    tmp / "upstream.log",
                )
            )
            base = f"http://127.0.0.1:{port}"
            wait_http(upstream, f"{base}/v1/models", timeout=30)
            log(f"upstream on {base}")
            targets = [
                Target(
                    "direct",
                    f"{base}/v1/chat/completions",
                    {"Content-Type": "application/json"},
                    upstream,
                )
            ]
            if "reference" in args.targets:
                targets.append(stack.enter_context(reference(tmp, base)))
            redis = stack.enter_context(redis_url())
            if "gateway" in args.targets:
                gw = stack.enter_context(gateway(tmp, base, redis, args.profile_gateway))
                log(f"gateway on {gw.base_url} (redis {redis})")
                headers = {"Content-Type": "application/json"}
                headers["Authorization"] = f"Bearer {gw.token}"
                targets.insert(
                    1, Target("gateway", f"{gw.base_url}/v1/chat/completions", headers, gw.proc)
                )
            if "gateway-nometrics" in args.targets:
                bare = stack.enter_context(gateway(tmp, base, redis, None, metrics=False))
                log(f"gateway without metrics on {bare.base_url}")
                headers = {"Content-Type": "application/json"}
                headers["Authorization"] = f"Bearer {bare.token}"
                url = f"{bare.base_url}/v1/chat/completions"
                targets.append(Target("gateway-nometrics", url, headers, bare.proc))
            report.update(asyncio.run(bench(args, targets, redis)))
            with contextlib.suppress(OSError):
                report["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
            report["targets_note"] = (
                "through the gateway with authentication, policy and the Redis quota check on"
            )
            report["scaling_note"] = SCALING_NOTE
            for target in targets[1:]:
                errors = sum(r.get(target.name, {}).get("errors", 0) for r in report["results"])
                if target.proc is not None and errors:
                    # Always shown, --json-only or not: errors make the figures suspect.
                    print(
                        f"bench/proxy.py: the {target.name} answered {errors} errors; its "
                        f"output:\n{target.proc.log_tail(20000)}",
                        file=sys.stderr,
                    )
    except BenchError as err:
        print(f"bench/proxy.py: {err}", file=sys.stderr)
        return 1
    finally:
        if args.keep_tmp:
            log(f"kept {tmp} (config, database, process logs)")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(report, indent=2))
    if args.profile_gateway and not _quiet:
        print_profile(args.profile_gateway)
    return 0


def print_profile(path: str, top: int = 25) -> None:
    import pstats

    if not Path(path).exists():
        log(f"no profile at {path} (the gateway did not exit cleanly)")
        return
    for order in ("cumulative", "tottime"):
        stats = pstats.Stats(path, stream=sys.stderr)
        stats.strip_dirs().sort_stats(order).print_stats(top)


if __name__ == "__main__":
    sys.exit(main())
