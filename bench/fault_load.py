"""The load of a fault scenario, and what each call and submission got.

- Inference clients: each bound to one gateway and one tenant, streaming or not, calling
  in a loop. After a 200 a client pauses ``think`` seconds; after a 429 ``RETRY_429``
  seconds (it probes for quota handed out again instead of sleeping out a Retry-After
  of up to a minute); after any other failure ``RETRY_ERROR`` seconds. Every call has a
  client timeout: a call the gateway holds longer is a ``timeout``.
- A trickle of workload submissions, each with its own Idempotency-Key, retried with
  the same key (alternating gateways, backing off) on 5xx, 429, timeouts and connection
  errors, as a real client would, until accepted, refused with another 4xx, or the
  give-up time.

Times are seconds of ``time.monotonic()`` from the scenario's start.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench.fault_stack import MODEL

__all__ = [
    "Attempt",
    "Call",
    "Clock",
    "Deadline",
    "Submission",
    "infer_forever",
    "submit_trickle",
]

RETRY_429 = 0.2
RETRY_ERROR = 0.05
DETAIL = 200  # bytes of an error's body kept
PROMPT = [{"role": "user", "content": "Say hello in five words."}]
# Estimates: about 10 prompt tokens plus max_tokens; the upstream always reports 21
# tokens used, so an unreconciled roomy reservation overcharges about 245.
MAX_TOKENS = {"roomy": 256, "tight": 32}
JOB = ["/bin/sh", "-c", "echo $IGNARA_WORKLOAD_ID"]  # a run says which workload it was


class Clock:
    def __init__(self) -> None:
        self.zero = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.zero


@dataclass
class Deadline:
    """When the load stops; moved later while a fault takes long to remove."""

    at: float


@dataclass(slots=True)
class Call:
    tenant: str
    gateway: int
    stream: bool
    start: float
    end: float
    outcome: str  # "200", "429 rate_limit_exceeded", "503 ledger_unavailable", "timeout", ...
    tokens: int = 0  # the usage the upstream reported, for a 200
    detail: str = ""  # the start of an error's body

    @property
    def ok(self) -> bool:
        return self.outcome == "200"


@dataclass(slots=True)
class Attempt:
    gateway: int
    start: float
    end: float
    outcome: str


@dataclass
class Submission:
    key: str
    start: float
    attempts: list[Attempt] = field(default_factory=list)
    workload_id: str | None = None
    refused: str | None = None  # the final 4xx, if refused

    @property
    def accepted(self) -> bool:
        return self.workload_id is not None


def _error_code(raw: bytes) -> str | None:
    try:
        error = json.loads(raw).get("error")
    except (ValueError, AttributeError):
        return "not-json"
    if isinstance(error, dict):
        code = error.get("code")
        return str(code) if code is not None else None
    return "no-error-object"


def _connection_outcome(err: aiohttp.ClientError) -> str:
    """``connection refused`` (nothing listens), else ``connection dropped`` (reset or
    closed before the answer was whole)."""
    if isinstance(err, aiohttp.ClientConnectorError):
        return "connection refused"
    return "connection dropped"


def _stream_result(raw: bytes) -> tuple[str, int]:
    """A streamed 200: ``("200", tokens)`` when it ended with ``[DONE]`` and reported
    usage; else what went wrong."""
    tokens, done, error = 0, False, None
    for line in raw.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            done = True
            continue
        try:
            event = json.loads(data)
        except ValueError:
            return "stream-bad-event", 0
        if isinstance(event.get("error"), dict):
            error = str(event["error"].get("code"))
        if event.get("usage"):
            tokens = int(event["usage"].get("total_tokens", 0))
    if error is not None:
        return f"stream-error {error}", 0
    if not done:
        return "stream-cut", 0
    return "200", tokens


async def call_once(
    session: aiohttp.ClientSession, url: str, token: str, tenant: str, stream: bool, timeout: float
) -> tuple[str, int, str]:
    """The outcome, the tokens reported used (a 200) and the start of an error's body."""
    body: dict[str, Any] = {"model": MODEL, "messages": PROMPT, "max_tokens": MAX_TOKENS[tenant]}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with session.post(
            f"{url}/v1/chat/completions",
            json=body,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as response:
            raw = await response.read()
            status = response.status
    except TimeoutError:
        return "timeout", 0, ""
    except aiohttp.ClientError as err:
        return _connection_outcome(err), 0, f"{type(err).__name__}: {err}"[:DETAIL]
    if status != 200:
        return f"{status} {_error_code(raw)}", 0, raw[:DETAIL].decode(errors="replace")
    if stream:
        outcome, tokens = _stream_result(raw)
        return outcome, tokens, "" if outcome == "200" else raw[-DETAIL:].decode(errors="replace")
    try:
        return "200", int(json.loads(raw)["usage"]["total_tokens"]), ""
    except (ValueError, KeyError, TypeError):
        return "200-bad-body", 0, raw[:DETAIL].decode(errors="replace")


async def infer_forever(
    session: aiohttp.ClientSession,
    clock: Clock,
    *,
    urls: list[str],
    gateway: int,
    token: str,
    tenant: str,
    stream: bool,
    think: float,
    timeout: float,
    until: Deadline,
    out: list[Call],
) -> None:
    while (start := clock()) < until.at:
        outcome, tokens, detail = await call_once(
            session, urls[gateway], token, tenant, stream, timeout
        )
        out.append(Call(tenant, gateway, stream, start, clock(), outcome, tokens, detail))
        if outcome == "200":
            await asyncio.sleep(think)
        elif outcome.startswith("429"):
            await asyncio.sleep(RETRY_429)
        else:
            await asyncio.sleep(RETRY_ERROR)


def _retryable(outcome: str) -> bool:
    return not outcome[:1].isdigit() or outcome.startswith(("5", "429"))


async def submit_until_accepted(
    session: aiohttp.ClientSession,
    clock: Clock,
    submission: Submission,
    *,
    urls: list[str],
    first_gateway: int,
    token: str,
    timeout: float,
    give_up: Deadline,
) -> None:
    body = {
        "name": f"job-{submission.key.rsplit('-', 1)[-1]}",
        "queue": "batch",
        "pod_sets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}}],
        "max_runtime_seconds": 120,
        "job": {"command": JOB},
    }
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": submission.key}
    backoff = 0.25
    for n in range(10_000):
        gateway = (first_gateway + n) % len(urls)
        start = clock()
        workload_id = None
        try:
            async with session.post(
                f"{urls[gateway]}/api/v1/workloads",
                json=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as response:
                raw = await response.read()
                outcome = str(response.status)
                if response.status in (200, 201):
                    workload_id = json.loads(raw)["id"]
                else:
                    outcome = f"{response.status} {_error_code(raw)}"
        except TimeoutError:
            outcome = "timeout"
        except aiohttp.ClientError as err:
            outcome = _connection_outcome(err)
        submission.attempts.append(Attempt(gateway, start, clock(), outcome))
        if workload_id is not None:
            submission.workload_id = workload_id
            return
        if not _retryable(outcome):
            submission.refused = outcome
            return
        if clock() + backoff > give_up.at:
            return
        await asyncio.sleep(backoff)
        backoff = min(2.0, backoff * 2)


async def submit_trickle(
    session: aiohttp.ClientSession,
    clock: Clock,
    *,
    urls: list[str],
    token: str,
    every: float,
    timeout: float,
    until: Deadline,
    give_up_after: float,
    prefix: str,
    out: list[Submission],
) -> None:
    """One new submission every ``every`` seconds until the deadline, each retried on its
    own until accepted, refused, or ``give_up_after`` seconds past the deadline; returns
    once every one is settled."""
    running = []
    n = 0
    give_up = Deadline(math.inf)
    while clock() < until.at:
        submission = Submission(f"{prefix}-{n}", clock())
        out.append(submission)
        running.append(
            asyncio.create_task(
                submit_until_accepted(
                    session,
                    clock,
                    submission,
                    urls=urls,
                    first_gateway=n % len(urls),
                    token=token,
                    timeout=timeout,
                    give_up=give_up,
                )
            )
        )
        n += 1
        await asyncio.sleep(every)
    give_up.at = until.at + give_up_after
    await asyncio.gather(*running)
