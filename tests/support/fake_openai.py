"""FakeOpenAI: a real OpenAI-compatible HTTP server on 127.0.0.1 for tests.

Deterministic usage: prompt tokens = number of words in the prompt (message contents,
``prompt`` or ``input``); completion tokens = ``min(max_tokens, completion_tokens)``, one
streamed chunk per completion token.

Failure knobs (attributes, change them any time):
    ``delay``              seconds to wait before sending headers (slow upstream)
    ``fail_status``        answer every inference call with this status (e.g. 500, 503)
    ``malformed``          send a 200 with a body that is not JSON
    ``holds``              {name: asyncio.Event}: a stream whose request names it in
                           ``user`` waits for the event before its last chunk
    ``break_after``        cut the connection after this many streamed chunks
    ``chunk_delay``        seconds between streamed chunks
    ``prompt_scale``       report this many prompt tokens a word (a tokenizer that
                           counts more than the gateway's estimate)
    ``ignore_max_tokens``  write ``completion_tokens`` whatever the call's bound
``await stop()`` makes it "down" (nothing listens on its port); ``await start()`` brings it
back on the same port. ``requests`` counts calls per path; ``disconnects`` counts streams the
client abandoned; ``streams_finished`` counts streams sent to the end; ``bodies`` holds the
JSON body of every inference call, as received.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

from aiohttp import web

__all__ = ["FakeOpenAI"]


class FakeOpenAI:
    def __init__(
        self, *, models: tuple[str, ...] = ("fake-model",), completion_tokens: int = 5
    ) -> None:
        self.models = models
        self.completion_tokens = completion_tokens
        self.delay = 0.0
        self.fail_status: int | None = None
        self.malformed = False
        self.holds: dict[str, asyncio.Event] = {}
        self.break_after: int | None = None
        self.chunk_delay = 0.0
        self.prompt_scale = 1
        self.ignore_max_tokens = False
        self.bodies: list[dict[str, Any]] = []
        self.requests: Counter[str] = Counter()
        self.auth_headers: list[str | None] = []
        self.disconnects = 0
        self.streams_finished = 0
        self.disconnected = asyncio.Event()
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/embeddings", self._embeddings)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        if self.port == 0:
            self.port = int(runner.addresses[0][1])
        self._runner = runner

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> FakeOpenAI:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- handlers ---------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.StreamResponse:
        self.requests["/v1/models"] += 1
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _prelude(self, request: web.Request) -> tuple[dict[str, Any], web.Response | None]:
        self.requests[request.path] += 1
        self.auth_headers.append(request.headers.get("Authorization"))
        body = await request.json()
        self.bodies.append(body)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail_status is not None:
            error = {"error": {"message": "fake failure", "type": "server_error", "code": None}}
            return body, web.json_response(error, status=self.fail_status)
        if self.malformed:
            return body, web.Response(text='{"id": "broken', content_type="application/json")
        return body, None

    def _usage(self, prompt_words: int, body: dict[str, Any]) -> dict[str, int]:
        limit = body.get("max_tokens") or body.get("max_completion_tokens")
        completion = min(int(limit or self.completion_tokens), self.completion_tokens)
        if self.ignore_max_tokens:
            completion = self.completion_tokens
        prompt_words *= self.prompt_scale
        return {
            "prompt_tokens": prompt_words,
            "completion_tokens": completion,
            "total_tokens": prompt_words + completion,
        }

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body, failure = await self._prelude(request)
        if failure is not None:
            return failure
        words = sum(_words(m.get("content")) for m in body.get("messages", []))
        usage = self._usage(words, body)
        model = body.get("model", self.models[0])
        if body.get("stream"):
            include = bool((body.get("stream_options") or {}).get("include_usage"))
            hold = self.holds.get(str(body.get("user")))
            return await self._stream(request, model, usage, include, chat=True, hold=hold)
        text = " ".join(f"tok{i}" for i in range(usage["completion_tokens"]))
        return web.json_response(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            }
        )

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body, failure = await self._prelude(request)
        if failure is not None:
            return failure
        prompt = body.get("prompt", "")
        words = sum(_words(p) for p in prompt) if isinstance(prompt, list) else _words(prompt)
        usage = self._usage(words, body)
        model = body.get("model", self.models[0])
        if body.get("stream"):
            include = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._stream(request, model, usage, include, chat=False)
        text = " ".join(f"tok{i}" for i in range(usage["completion_tokens"]))
        return web.json_response(
            {
                "id": "cmpl-fake",
                "object": "text_completion",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}],
                "usage": usage,
            }
        )

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        body, failure = await self._prelude(request)
        if failure is not None:
            return failure
        raw = body.get("input", "")
        inputs = raw if isinstance(raw, list) else [raw]
        words = sum(_words(i) for i in inputs)
        data = [
            {"object": "embedding", "index": n, "embedding": _vector(str(item))}
            for n, item in enumerate(inputs)
        ]
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": body.get("model", self.models[0]),
                "usage": {"prompt_tokens": words, "total_tokens": words},
            }
        )

    async def _stream(
        self,
        request: web.Request,
        model: str,
        usage: dict[str, int],
        include_usage: bool,
        *,
        chat: bool,
        hold: asyncio.Event | None = None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        events = [_chunk(model, i, chat) for i in range(usage["completion_tokens"])]
        events.append(_chunk(model, None, chat))
        if include_usage:
            events.append({**_chunk(model, None, chat), "choices": [], "usage": usage})
        try:
            for sent, event in enumerate(events):
                if self.break_after is not None and sent >= self.break_after:
                    assert request.transport is not None
                    request.transport.abort()
                    return response
                if hold is not None and sent == len(events) - 1:
                    await hold.wait()
                await response.write(f"data: {json.dumps(event)}\n\n".encode())
                if self.chunk_delay:
                    await asyncio.sleep(self.chunk_delay)
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.disconnects += 1
            self.disconnected.set()
            raise
        self.streams_finished += 1
        return response


def _vector(text: str) -> list[float]:
    return [float(len(text) + k) for k in range(8)]


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):  # content parts
        return sum(_words(part.get("text", "")) for part in value if isinstance(part, dict))
    return 0


def _chunk(model: str, index: int | None, chat: bool) -> dict[str, Any]:
    finish = "stop" if index is None else None
    if chat:
        delta: dict[str, Any] = {} if index is None else {"content": f"tok{index} "}
        if index == 0:
            delta["role"] = "assistant"
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        kind = "chat.completion.chunk"
    else:
        text = "" if index is None else f"tok{index} "
        choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
        kind = "text_completion"
    return {
        "id": "chatcmpl-fake" if chat else "cmpl-fake",
        "object": kind,
        "created": 0,
        "model": model,
        "choices": [choice],
    }
