"""Cutting a stream that runs past the output it reserved.

A call reserves ``max_tokens`` x ``n`` for its output, and the gateway forwards
that bound (:mod:`gateway.inference.calls`). An upstream that ignores it writes on,
and the call settles at what it wrote: past its reservation, and past the queue's
quota when many such calls are in flight. So the gateway counts what a stream
writes and, once the count passes the reservation by ``margin`` (a share of it)
plus :data:`SLACK` tokens, it ends the stream as an upstream that reached
``max_tokens`` would: a last chunk with ``finish_reason: "length"`` for every
choice still open, a usage chunk when the client asked for one (the gateway's
count and input estimate, ``prompt()``, which is what it charges: the upstream's
usage never comes), and ``data: [DONE]``; the upstream connection is then closed,
which stops its work.

The count is cheap and errs low, so an honest stream is never cut short: the larger
of the data events that carry choices (servers send about one token per event) and
the characters of their text (content, reasoning, refusals, tool-call arguments) at
four a token. Events are decoded into a few typed fields only.

A whole (non-streaming) answer cannot be cut: it is charged what the upstream
reports, overshoot included.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import msgspec

from gateway.inference.calls import CHARS_PER_TOKEN, estimate_text_tokens

__all__ = ["SLACK", "OutputMeter"]

SLACK = 16  # tokens past the margin: a role chunk, a final empty chunk, rounding
_DONE = b"[DONE]"
_encoder = msgspec.json.Encoder()


class _Function(msgspec.Struct):
    arguments: str | None = None


class _ToolCall(msgspec.Struct):
    function: _Function | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    refusal: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(msgspec.Struct):
    index: int = 0
    delta: _Delta | None = None
    text: str | None = None
    finish_reason: str | None = None


class _Chunk(msgspec.Struct):
    id: str | None = None
    created: int | float | None = None
    model: str | None = None
    choices: list[_Choice] = []


_chunk_decoder = msgspec.json.Decoder(_Chunk)


class OutputMeter:
    """Counts a stream's output; :meth:`take` passes events on until the count passes
    ``limit``, then :meth:`ending` closes the stream.

    Usage::

        meter = OutputMeter(
            reserved=64, margin=0.25, chat=True, prompt=lambda: 12, usage_chunk=False
        )
        kept, over = meter.take(block, b"\\n\\n")   # complete events only
        if over:
            kept += meter.ending(b"\\n\\n")
    """

    __slots__ = (
        "_char_limit",
        "_chat",
        "_created",
        "_finished",
        "_id",
        "_model",
        "_open",
        "_prompt",
        "_usage_chunk",
        "chars",
        "events",
        "limit",
    )

    def __init__(
        self,
        *,
        reserved: int,
        margin: float,
        chat: bool,
        prompt: Callable[[], int],
        usage_chunk: bool,
    ) -> None:
        self.limit = reserved + math.ceil(reserved * margin) + SLACK
        self._char_limit = self.limit * CHARS_PER_TOKEN
        self.events = 0  # data events that carried choices
        self.chars = 0  # characters of their text
        self._chat = chat
        self._prompt = prompt
        self._usage_chunk = usage_chunk
        self._id: str | None = None
        self._created: int | float | None = None
        self._model: str | None = None
        self._open: set[int] = set()
        self._finished: set[int] = set()

    @property
    def tokens(self) -> int:
        """Output tokens streamed so far, as counted here."""
        return max(self.events, estimate_text_tokens(self.chars))

    def take(self, block: bytes, separator: bytes) -> tuple[bytes, bool]:
        """The events of ``block`` (complete events, each ending with ``separator``)
        to pass on, and whether the stream went past its limit (the event that
        passed it and everything after are left out)."""
        start = 0
        while start < len(block):
            end = block.find(separator, start)
            end = len(block) if end < 0 else end + len(separator)
            self._count(block[start:end])
            # self.tokens > self.limit, without the property's cost on every event
            if self.events > self.limit or self.chars > self._char_limit:
                return block[:start], True
            start = end
        return block, False

    def ending(self, separator: bytes) -> bytes:
        """The events that end a cut stream: finish, usage if asked for, ``[DONE]``."""
        out = []
        still_open = sorted(self._open - self._finished) or ([] if self._finished else [0])
        if still_open:
            out.append(self._event([self._finish(index) for index in still_open]))
        if self._usage_chunk:
            prompt, completion = self._prompt(), self.tokens
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
            out.append(self._event([], usage))
        out.append(b"data: " + _DONE)
        return separator.join(out) + separator

    def _count(self, event: bytes) -> None:
        chunk: _Chunk | None
        try:
            # The usual event is one ``data:`` line: decoded as it is, past the prefix.
            chunk = _chunk_decoder.decode(event[5:] if event.startswith(b"data:") else event)
        except (msgspec.DecodeError, msgspec.ValidationError):
            chunk = self._decode_lines(event)
        if chunk is None:
            return
        choices = chunk.choices
        if not choices:
            return  # the usage chunk, or an empty keep-alive
        if self._id is None:
            self._id, self._created, self._model = chunk.id, chunk.created, chunk.model
        self.events += 1
        for choice in choices:
            self._open.add(choice.index)
            if choice.finish_reason is not None:
                self._finished.add(choice.index)
            delta = choice.delta
            if delta is not None and delta.content and _plain(delta):  # the usual event
                self.chars += len(delta.content)
            else:
                self.chars += _text_chars(choice)

    def _decode_lines(self, event: bytes) -> _Chunk | None:
        """An event of several lines, ``[DONE]``, a comment, or not the shape counted."""
        lines = [line[5:] for line in event.splitlines() if line.startswith(b"data:")]
        payload = b"\n".join(lines).strip()
        if not payload or payload == _DONE:
            return None
        try:
            return _chunk_decoder.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            # Not the shape counted here: it still cost the upstream about a token.
            self.events += 1
            return None

    def _finish(self, index: int) -> dict[str, Any]:
        if self._chat:
            return {"index": index, "delta": {}, "logprobs": None, "finish_reason": "length"}
        return {"index": index, "text": "", "logprobs": None, "finish_reason": "length"}

    def _event(self, choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> bytes:
        body: dict[str, Any] = {
            "id": self._id or ("chatcmpl-ignara" if self._chat else "cmpl-ignara"),
            "object": "chat.completion.chunk" if self._chat else "text_completion",
            "created": self._created if self._created is not None else 0,
            "model": self._model or "",
            "choices": choices,
        }
        if usage is not None:
            body["usage"] = usage
        return b"data: " + _encoder.encode(body)


def _plain(delta: _Delta) -> bool:
    """Only ``content`` carries text (the usual delta)."""
    return (
        delta.reasoning_content is None
        and delta.reasoning is None
        and delta.refusal is None
        and delta.tool_calls is None
    )


def _text_chars(choice: _Choice) -> int:
    chars = len(choice.text) if choice.text else 0
    delta = choice.delta
    if delta is not None:
        for text in (delta.content, delta.reasoning_content, delta.reasoning, delta.refusal):
            if text:
                chars += len(text)
        for call in delta.tool_calls or ():
            if call.function is not None and call.function.arguments:
                chars += len(call.function.arguments)
    return chars
