"""Overshoot benchmark: how far past its per-minute token quota a queue is taken by calls
the gateway under-estimates, with the bounds on (``after``) and off (``before``).

    python -m bench.overshoot [--variants before,after] [--seconds 130] [--concurrency 32]
                              [--quota 30000] [--prompt-factor 3] [--overrun 2]

Each variant starts its own servers in a temporary directory and stops them at the end: a
throwaway Redis (``tests/support/faults.py``'s ``OwnedRedis``, never ``REDIS_URL``'s), the
upstream of ``bench/upstream.py`` and one ``ignara serve`` on a SQLite file. One tenant
calls one model through a queue with ``--quota`` tokens per minute (and a day budget far
above the load, which sums every charge of the run). The upstream under-reports to the
gateway's estimator in both ways the issue names:

- every prompt it is sent it counts ``--prompt-factor`` times what the gateway estimates
  (a tokenizer that counts more than four characters a token);
- a call that names ``max_tokens`` gets ``--overrun`` times that many tokens (an upstream
  that ignores the bound); one that names none gets ``--natural-tokens`` (a model that
  goes on until it stops), while the gateway reserves ``default_max_tokens`` (64) for it.

``--concurrency`` clients call in a loop (no pause after a 200, ``RETRY_429`` after a
429), a quarter each: whole answers naming ``max_tokens`` 64, whole answers naming none,
streams naming 64, streams naming none (streams ask for ``include_usage``). Meanwhile the
ledger's ``tokens-per-minute`` hold of the queue (a sliding 60 s window: every charge of
the last minute, in-flight reservations at their estimate) is read every ``--sample``
seconds. With the quota full, a call is admitted only as others' charges age out, so what
the window holds past the quota is what calls in flight were charged past what they had
reserved.

Variants (the gateway's settings; see the README's token quota section):

- ``before``: every bound off (``IGNARA_CAP_OUTPUT=0``, ``IGNARA_ESTIMATE_MAX_FACTOR=1``,
  ``IGNARA_STREAM_CUT_MARGIN=off``): the gateway as it was;
- ``after``: the defaults (output bound forwarded, corrections learned up to 8x, streams
  cut 25 % + 16 tokens past their reserved output);
- ``cap-only``, ``learn-only``, ``cut-only``: one of them.

Prints one JSON object on stdout; per variant:

- ``calls``: calls by outcome (status and ``error.code``);
- ``ledger``: ``max_held`` (the most the window held at any sample) and
  ``max_held_over_quota`` (that / the quota), the same per 60 s of the run
  (``windows``: the first includes the gateway's first calls, before it has learned
  anything), and ``charged_total`` (the day budget's charge: every token charged);
- ``granted``: the usage the calls got back (``total``), the most of it among calls begun
  within any 60 s (``max_in_60s``) and that / the quota;
- ``per_kind``: per kind of call, calls answered 200, mean prompt and completion tokens
  charged, and ``cut`` (streams that ended before what the upstream would have written).

Run on demand, never from tests. The load, the gateway, the upstream and Redis share the
machine's CPUs; the ratios do not depend on its speed as much as latencies do, but the
number of calls in flight when the quota fills does.
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
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from bench.fault_stack import Gateway
from bench.proxy import BenchError, free_port, process, wait_http
from gateway.ledgers import create_ledger
from quota.config import parse_quota_config
from tests.support.faults import OwnedRedis

ROOT = Path(__file__).resolve().parents[1]
MODEL = "bench-model"
FLAVOR = "bench-pool"
QUEUE = "capped"
DEFAULT_MAX_TOKENS = 64
MAX_TOKENS = 64
RETRY_429 = 0.2
RETRY_ERROR = 0.05
# Digits and punctuation: a real tokenizer counts them far above four characters a token.
PROMPT = [{"role": "user", "content": ("31415-92653; 58979/32384. " * 16).strip()}]
VARIANTS: dict[str, dict[str, str]] = {
    "before": {
        "IGNARA_CAP_OUTPUT": "0",
        "IGNARA_ESTIMATE_MAX_FACTOR": "1",
        "IGNARA_STREAM_CUT_MARGIN": "off",
    },
    "after": {},
    "cap-only": {"IGNARA_ESTIMATE_MAX_FACTOR": "1", "IGNARA_STREAM_CUT_MARGIN": "off"},
    "learn-only": {"IGNARA_CAP_OUTPUT": "0", "IGNARA_STREAM_CUT_MARGIN": "off"},
    "cut-only": {"IGNARA_CAP_OUTPUT": "0", "IGNARA_ESTIMATE_MAX_FACTOR": "1"},
}
KINDS = ("whole, max_tokens 64", "whole, no max_tokens", "stream, max_tokens 64",
         "stream, no max_tokens")  # fmt: skip

_quiet = False


def log(message: str) -> None:
    if not _quiet:
        print(message, file=sys.stderr, flush=True)


def quota(per_minute: int) -> dict[str, Any]:
    return {
        "flavors": [FLAVOR],
        "cluster_queues": [
            {
                "name": QUEUE,
                "resource_groups": [
                    {
                        "resources": ["tokens-per-minute", "tokens-per-day"],
                        "flavors": [
                            {
                                "name": FLAVOR,
                                "quotas": {
                                    "tokens-per-minute": {"nominal": per_minute},
                                    "tokens-per-day": {"nominal": 10**12},
                                },
                            }
                        ],
                    }
                ],
            }
        ],
    }


def config(upstream: str, per_minute: int) -> dict[str, Any]:
    return {
        **quota(per_minute),
        "tenants": [{"name": QUEUE, "queues": [QUEUE]}],
        "models": [{"name": MODEL, "flavor": FLAVOR, "endpoints": [{"base_url": upstream}]}],
        "inference": {"default_max_tokens": DEFAULT_MAX_TOKENS},
    }


@dataclass
class Stack:
    redis: OwnedRedis
    gateway: Gateway
    key: str


@contextmanager
def stack(tmp: Path, args: argparse.Namespace, env: dict[str, str]) -> Iterator[Stack]:
    if shutil.which("redis-server") is None:
        raise BenchError("redis-server is not installed")
    with ExitStack() as started:
        redis = started.enter_context(OwnedRedis())
        port = free_port()
        command = [sys.executable, str(ROOT / "bench" / "upstream.py"), "--port", str(port)]
        command += ["--delay", str(args.upstream_delay), "--chunk-delay", str(args.chunk_delay)]
        command += ["--prompt-factor", str(args.prompt_factor), "--overrun", str(args.overrun)]
        command += ["--natural-tokens", str(args.natural_tokens)]
        upstream = started.enter_context(process("upstream", command, tmp / "upstream.log"))
        wait_http(upstream, f"http://127.0.0.1:{port}/v1/models", timeout=30)
        admin_key = secrets.token_urlsafe(32)
        gateway_env = {
            "DATABASE_URL": f"sqlite:///{tmp / 'gateway.db'}",
            "REDIS_URL": redis.url,
            "IGNARA_ADMIN_KEY": admin_key,
            "IGNARA_KEY_PEPPER": secrets.token_urlsafe(32),
            "IGNARA_LOCAL_BACKEND_ROOT": str(tmp / "jobs"),
            "IGNARA_LOG_LEVEL": "warning",
            "IGNARA_HEALTH_INTERVAL": "3600",
            **env,
        }
        gateway = Gateway("a", free_port(), gateway_env, tmp)
        started.callback(gateway.stop)
        gateway.start()
        gateway.wait_healthy()
        key = configure(gateway, admin_key, f"http://127.0.0.1:{port}/v1", args.quota)
        yield Stack(redis, gateway, key)


def configure(gateway: Gateway, admin_key: str, upstream: str, per_minute: int) -> str:
    admin = {"Authorization": f"Bearer {admin_key}"}
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        applied = client.post(
            "/api/v1/admin/config", json=config(upstream, per_minute), headers=admin
        )
        if applied.status_code != 201:
            raise BenchError(f"config refused: {applied.status_code} {applied.text}")
        made = client.post(
            f"/api/v1/admin/tenants/{QUEUE}/keys",
            json={"principal": "bench", "roles": ["member"]},
            headers=admin,
        )
        if made.status_code != 201:
            raise BenchError(f"key refused: {made.status_code} {made.text}")
        key: str = made.json()["token"]
        deadline = time.monotonic() + 20
        while True:
            models = client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
            if models.status_code == 200 and models.json()["data"]:
                return key
            if time.monotonic() > deadline:
                raise BenchError(f"the gateway does not serve the model: {models.text}")
            time.sleep(0.1)


# -- the load ------------------------------------------------------------------------------


@dataclass(slots=True)
class Call:
    kind: str
    start: float
    outcome: str
    prompt: int = 0
    completion: int = 0
    finish: str | None = None


async def one_call(
    session: aiohttp.ClientSession, url: str, key: str, kind: str, start: float
) -> Call:
    stream = kind.startswith("stream")
    body: dict[str, Any] = {"model": MODEL, "messages": PROMPT}
    if "no max_tokens" not in kind:
        body["max_tokens"] = MAX_TOKENS
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    headers = {"Authorization": f"Bearer {key}"}
    try:
        async with session.post(
            f"{url}/v1/chat/completions",
            json=body,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=30),
        ) as response:
            raw = await response.read()
            if response.status != 200:
                code = None
                with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
                    code = json.loads(raw)["error"]["code"]
                return Call(kind, start, f"{response.status} {code or 'not-json'}")
    except (TimeoutError, aiohttp.ClientError) as err:
        return Call(kind, start, type(err).__name__)
    return _answered(kind, start, raw, stream)


def _answered(kind: str, start: float, raw: bytes, stream: bool) -> Call:
    if not stream:
        answer = json.loads(raw)
        usage = answer.get("usage") or {}
        finish = answer["choices"][0].get("finish_reason")
        return Call(kind, start, "200", usage.get("prompt_tokens", 0),
                    usage.get("completion_tokens", 0), finish)  # fmt: skip
    usage, finish = {}, None
    for event in raw.split(b"\n\n"):
        if not event.startswith(b"data: {"):
            continue
        chunk = json.loads(event[6:])
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            finish = choice.get("finish_reason") or finish
    return Call(kind, start, "200", usage.get("prompt_tokens", 0),
                usage.get("completion_tokens", 0), finish)  # fmt: skip


async def client_loop(
    session: aiohttp.ClientSession, s: Stack, kind: str, zero: float, until: float,
    out: list[Call],
) -> None:  # fmt: skip
    while (now := time.monotonic() - zero) < until:
        call = await one_call(session, s.gateway.url, s.key, kind, now)
        out.append(call)
        if call.outcome.startswith("429"):
            await asyncio.sleep(RETRY_429)
        elif call.outcome != "200":
            await asyncio.sleep(RETRY_ERROR)


async def sampler(s: Stack, per_minute: int, zero: float, until: float, every: float,
                  out: list[tuple[float, int]]) -> None:  # fmt: skip
    ledger = create_ledger(s.redis.url, parse_quota_config(quota(per_minute)), prefix="ignara")
    try:
        while (now := time.monotonic() - zero) < until:
            out.append((now, await ledger.usage(QUEUE, FLAVOR, "tokens-per-minute")))
            await asyncio.sleep(every)
    finally:
        await ledger.aclose()


async def drive(s: Stack, args: argparse.Namespace) -> dict[str, Any]:
    calls: list[Call] = []
    samples: list[tuple[float, int]] = []
    kinds = [KINDS[i % len(KINDS)] for i in range(args.concurrency)]
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        zero = time.monotonic()
        await asyncio.gather(
            sampler(s, args.quota, zero, args.seconds + 2, args.sample, samples),
            *(client_loop(session, s, kind, zero, args.seconds, calls) for kind in kinds),
        )
    await asyncio.sleep(1.0)  # the last reconciliations
    ledger = create_ledger(s.redis.url, parse_quota_config(quota(args.quota)), prefix="ignara")
    try:
        charged = await ledger.usage(QUEUE, FLAVOR, "tokens-per-day")
    finally:
        await ledger.aclose()
    least = min(math.ceil(MAX_TOKENS * args.overrun), args.natural_tokens)
    return summary(calls, samples, charged, args.quota, args.seconds, least)


# -- the report ----------------------------------------------------------------------------


def summary(
    calls: list[Call], samples: list[tuple[float, int]], charged: int, per_minute: int,
    seconds: float, least_written: int,
) -> dict[str, Any]:  # fmt: skip
    ok = [c for c in calls if c.outcome == "200"]
    windows = []
    for start in range(0, int(seconds), 60):
        held = [h for t, h in samples if start <= t < start + 60]
        if held:
            windows.append({"from_s": start, "to_s": min(start + 60, int(seconds)),
                            "max_held": max(held),
                            "max_held_over_quota": round(max(held) / per_minute, 3)})  # fmt: skip
    max_held = max((h for _, h in samples), default=0)
    most = max_in_window([(c.start, c.prompt + c.completion) for c in ok], 60.0)
    per_kind = {}
    for kind in KINDS:
        mine = [c for c in ok if c.kind == kind]
        n = len(mine) or 1
        per_kind[kind] = {
            "calls_200": len(mine),
            "prompt_mean": round(sum(c.prompt for c in mine) / n, 1),
            "completion_mean": round(sum(c.completion for c in mine) / n, 1),
            "completion_max": max((c.completion for c in mine), default=0),
            # ended before the least the upstream writes for any call: cut by the gateway
            "cut": sum(1 for c in mine if c.completion < least_written),
        }
    return {
        "calls": dict(Counter(c.outcome for c in calls).most_common()),
        "ledger": {
            "quota_per_minute": per_minute,
            "max_held": max_held,
            "max_held_over_quota": round(max_held / per_minute, 3),
            "windows": windows,
            "charged_total": charged,
        },
        "granted": {
            "total": sum(c.prompt + c.completion for c in ok),
            "max_in_60s": most,
            "max_in_60s_over_quota": round(most / per_minute, 3),
        },
        "per_kind": per_kind,
    }


def max_in_window(points: list[tuple[float, int]], width: float) -> int:
    """The largest sum of amounts whose times fall within any ``width`` seconds."""
    points.sort()
    best = total = 0
    left = 0
    for t, amount in points:
        total += amount
        while points[left][0] <= t - width:
            total -= points[left][1]
            left += 1
        best = max(best, total)
    return best


# -- main ----------------------------------------------------------------------------------


def run_variant(name: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    workdir = tmp / name
    workdir.mkdir()
    env = VARIANTS[name]
    log(f"{name}: starting Redis, the upstream and a gateway ({env or 'defaults'})")
    with stack(workdir, args, env) as s:
        log(f"  load for {args.seconds:g}s at concurrency {args.concurrency}")
        result = asyncio.run(drive(s, args))
        if not s.gateway.alive:
            print(f"bench/overshoot.py: the gateway died:\n{s.gateway.log_tail()}", file=sys.stderr)
    log(f"  most held in a window: {result['ledger']['max_held_over_quota']}x the quota")
    return {"variant": name, "env": env, **result}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="before,after", help=",".join(VARIANTS))
    parser.add_argument("--seconds", type=float, default=130.0, help="load per variant")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--quota", type=int, default=30_000, help="tokens per minute")
    parser.add_argument("--prompt-factor", type=float, default=3.0, help="see the docstring")
    parser.add_argument("--overrun", type=float, default=2.0, help="x the named max_tokens")
    parser.add_argument("--natural-tokens", type=int, default=512, help="unbounded calls")
    parser.add_argument("--upstream-delay", type=float, default=0.02, help="before each answer")
    parser.add_argument("--chunk-delay", type=float, default=0.002, help="between stream events")
    parser.add_argument("--sample", type=float, default=0.25, help="ledger reads every, s")
    parser.add_argument("--json-only", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = set(args.variants) - set(VARIANTS)
    if unknown or not args.variants:
        parser.error(f"--variants: from {', '.join(VARIANTS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    global _quiet
    args = parse_args(argv)
    _quiet = args.json_only
    report: dict[str, Any] = {
        "machine": {
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
        "settings": {k: v for k, v in vars(args).items() if k != "json_only"},
        "prompt": PROMPT[0]["content"],
        "variants": [],
    }
    tmp = Path(tempfile.mkdtemp(prefix="ignara-overshoot-"))
    failed = False
    try:
        for name in args.variants:
            try:
                report["variants"].append(run_variant(name, args, tmp))
            except BenchError as err:
                print(f"bench/overshoot.py: {name}: {err}", file=sys.stderr)
                report["variants"].append({"variant": name, "error": str(err)[-2000:]})
                failed = True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
