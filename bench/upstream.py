"""A fast OpenAI-compatible upstream for benchmarks: fixed answers, no delay unless asked.

    python bench/upstream.py --port 9000 [--delay 0.02] [--chunk-delay 0.002]
                             [--prompt-factor 3] [--natural-tokens 512] [--overrun 2]

``GET /v1/models`` and ``POST /v1/chat/completions``. A chat completion answers a fixed
small ``chat.completion`` with ``usage``; with ``"stream": true`` it answers
``text/event-stream``: eight ``chat.completion.chunk`` events, then (when
``stream_options.include_usage`` is true) a chunk with ``"choices": []`` and ``usage``,
then ``data: [DONE]``. Every event is one write, as a real server streams them. All
bodies are encoded once at start-up, so the per-request work is parsing the request
body and writing bytes. ``--delay`` holds each answer that long before its headers, and
``--chunk-delay`` waits that long between stream events (both 0 by default): calls then
stay in flight a while, as a model server's do.

Overshoot options (``bench/overshoot.py``), off by default; any of them makes answers
built per call instead of pre-encoded: ``--prompt-factor F`` reports as prompt tokens F
times the messages' characters / 4 (a tokenizer that counts more than the gateway's
estimator); ``--natural-tokens N`` writes N tokens when the call names no
``max_tokens``/``max_completion_tokens`` (a model that goes on until it stops); and
``--overrun X`` writes X times the bound a call names (an upstream that ignores it).
Each token is the four characters `` tok``, one stream event each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

MODEL = "bench-model"
CREATED = 1_700_000_000
WORDS = ["Hello", " there,", " friend,", " how", " are", " you", " today", "?"]
USAGE = {"prompt_tokens": 13, "completion_tokens": len(WORDS), "total_tokens": 13 + len(WORDS)}


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


COMPLETION = _dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": CREATED,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(WORDS)},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": USAGE,
    }
)


def _chunk(choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": MODEL,
        "choices": choices,
    }
    if usage is not None:
        body["usage"] = usage
    return b"data: " + _dumps(body) + b"\n\n"


def _content_events() -> list[bytes]:
    events = []
    for i, word in enumerate(WORDS):
        delta: dict[str, Any] = {"content": word}
        if i == 0:
            delta = {"role": "assistant", "content": word}
        last = i == len(WORDS) - 1
        choice = {"index": 0, "delta": delta, "logprobs": None}
        choice["finish_reason"] = "stop" if last else None
        events.append(_chunk([choice]))
    return events


STREAM_EVENTS = _content_events()
USAGE_EVENT = _chunk([], USAGE)
DONE_EVENT = b"data: [DONE]\n\n"
MODELS = _dumps(
    {
        "object": "list",
        "data": [{"id": MODEL, "object": "model", "created": CREATED, "owned_by": "bench"}],
    }
)
JSON_HEADERS = {"Content-Type": "application/json"}
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


async def models(request: web.Request) -> web.StreamResponse:
    return web.Response(body=MODELS, headers=JSON_HEADERS)


def chat_completions(
    delay: float = 0.0, chunk_delay: float = 0.0
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The handler; without delays it never yields to the loop but to read and write."""

    async def handle(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            error = {"error": {"message": "body is not JSON", "type": "invalid_request_error"}}
            return web.Response(body=_dumps(error), status=400, headers=JSON_HEADERS)
        if delay:
            await asyncio.sleep(delay)
        if not body.get("stream"):
            return web.Response(body=COMPLETION, headers=JSON_HEADERS)
        options = body.get("stream_options") or {}
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        for event in STREAM_EVENTS:
            await response.write(event)
            if chunk_delay:
                await asyncio.sleep(chunk_delay)
        if options.get("include_usage"):
            await response.write(USAGE_EVENT)
        await response.write(DONE_EVENT)
        await response.write_eof()
        return response

    return handle


@dataclass(frozen=True)
class Overshoot:
    """How this upstream under-reports to the gateway's estimator (see the docstring)."""

    prompt_factor: float = 0.0  # 0: the fixed usage of the pre-encoded answers
    natural_tokens: int = len(WORDS)
    overrun: float = 1.0

    @property
    def on(self) -> bool:
        return self != Overshoot()

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        chars = sum(len(str(m.get("content") or "")) for m in body.get("messages") or ())
        prompt = math.ceil(self.prompt_factor * chars / 4) if self.prompt_factor else 13
        bounds = [body.get(f) for f in ("max_tokens", "max_completion_tokens")]
        named = [b for b in bounds if isinstance(b, int) and b > 0]
        completion = math.ceil(max(named) * self.overrun) if named else self.natural_tokens
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }


def overshooting(
    shape: Overshoot, delay: float, chunk_delay: float
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The handler of the overshoot options: answers built per call."""

    async def handle(request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        if delay:
            await asyncio.sleep(delay)
        usage = shape.usage(body)
        tokens = usage["completion_tokens"]
        if not body.get("stream"):
            answer = json.loads(COMPLETION)
            answer["choices"][0]["message"]["content"] = " tok" * tokens
            answer["choices"][0]["finish_reason"] = "length"
            answer["usage"] = usage
            return web.Response(body=_dumps(answer), headers=JSON_HEADERS)
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        for i in range(tokens):
            delta = {"role": "assistant", "content": " tok"} if i == 0 else {"content": " tok"}
            last = i == tokens - 1
            choice = {"index": 0, "delta": delta, "logprobs": None}
            choice["finish_reason"] = "length" if last else None
            await response.write(_chunk([choice]))
            if chunk_delay:
                await asyncio.sleep(chunk_delay)
        if (body.get("stream_options") or {}).get("include_usage"):
            await response.write(_chunk([], usage))
        await response.write(DONE_EVENT)
        await response.write_eof()
        return response

    return handle


def make_app(
    delay: float = 0.0, chunk_delay: float = 0.0, shape: Overshoot | None = None
) -> web.Application:
    app = web.Application()
    app.router.add_get("/v1/models", models)
    if shape is not None and shape.on:
        app.router.add_post("/v1/chat/completions", overshooting(shape, delay, chunk_delay))
    else:
        app.router.add_post("/v1/chat/completions", chat_completions(delay, chunk_delay))
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument(
        "--chunk-delay", type=float, default=0.0, help="seconds between stream events"
    )
    parser.add_argument("--prompt-factor", type=float, default=0.0, help="see the docstring")
    parser.add_argument("--natural-tokens", type=int, default=len(WORDS), help="unbounded calls")
    parser.add_argument("--overrun", type=float, default=1.0, help="x the named max_tokens")
    args = parser.parse_args(argv)
    shape = Overshoot(args.prompt_factor, args.natural_tokens, args.overrun)
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    print(f"bench upstream on http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    web.run_app(
        make_app(args.delay, args.chunk_delay, shape),
        host=args.host,
        port=args.port,
        access_log=None,
        print=None,
        backlog=1024,
        shutdown_timeout=0.5,
    )


if __name__ == "__main__":
    main()
