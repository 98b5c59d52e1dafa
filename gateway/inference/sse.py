"""Reading a passing Server-Sent Events stream without holding it up.

Bytes go to the client as they arrive, cut only at event boundaries (a client
cannot use half an event anyway). Events are parsed only when they may carry
usage, so the usual chunk costs a few byte searches. The usage chunk the gateway
asked for on the caller's behalf is taken out again. With an
:class:`~gateway.inference.overrun.OutputMeter`, a stream that writes past its
reservation is ended there (``cut``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.inference.overrun import OutputMeter

__all__ = ["StreamAccountant", "error_event"]

_SEPARATOR = b"\n\n"
_DONE = b"data: [DONE]"
_NULL_USAGE = (b'"usage":null', b'"usage": null')
_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


class StreamAccountant:
    """Feed upstream chunks; get back what to send. ``usage`` is the upstream's final
    usage object when it sent one; ``events`` counts data events (about one token each).
    With a ``meter``, ``cut`` becomes true when the stream went past its reservation:
    the last bytes returned end the stream, and the rest must not be read."""

    __slots__ = ("_pending", "_separator", "cut", "events", "meter", "strip_usage", "usage")

    def __init__(self, *, strip_usage: bool, meter: OutputMeter | None = None) -> None:
        self.strip_usage = strip_usage
        self.meter = meter
        self.usage: dict[str, Any] | None = None
        self.events = 0
        self.cut = False
        self._pending = b""
        self._separator = b""  # set by the first chunk: servers may end lines with CRLF

    @property
    def completion_estimate(self) -> int:
        """Output tokens streamed, when the upstream sent no usage."""
        return self.meter.tokens if self.meter is not None else self.events

    def feed(self, chunk: bytes) -> bytes:
        if self.cut:
            return b""
        data = self._pending + chunk if self._pending else chunk
        if not self._separator:
            self._separator = b"\r\n\r\n" if b"\r\n" in data else _SEPARATOR
        end = data.rfind(self._separator)
        if end < 0:
            self._pending = data
            return b""
        end += len(self._separator)
        self._pending = data[end:]
        return self._complete(data[:end])

    def flush(self) -> bytes:
        """What is left when the upstream ends (an unterminated last event)."""
        rest, self._pending = self._pending, b""
        if self.cut:
            return b""
        return self._complete(rest) if rest.strip() else rest

    def _complete(self, events: bytes) -> bytes:
        self.events += events.count(b"data:") - events.count(_DONE)
        separator = self._separator or _SEPARATOR
        if b'"usage"' in events:
            events = separator.join(e for e in events.split(separator) if self._keep(e))
        if self.meter is None:
            return events
        kept, over = self.meter.take(events, separator)
        if over:
            self.cut = True
            return kept + self.meter.ending(separator)
        return kept

    def _keep(self, event: bytes) -> bool:
        """Note the usage an event carries; drop it if it is only the usage we asked for."""
        if b'"usage"' not in event or any(null in event for null in _NULL_USAGE):
            return True
        payload = _data_of(event)
        if not isinstance(payload, dict) or not isinstance(payload.get("usage"), dict):
            return True
        self.usage = payload["usage"]
        return not (self.strip_usage and not payload.get("choices"))


def error_event(message: str, type_: str, code: str) -> bytes:
    """An error in OpenAI's streaming shape (the ``openai`` client raises on it)."""
    body = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return b"data: " + _encoder.encode(body) + _SEPARATOR


def _data_of(event: bytes) -> Any:
    lines = [line[5:].strip() for line in event.splitlines() if line.startswith(b"data:")]
    try:
        return _decoder.decode(b"\n".join(lines))
    except msgspec.DecodeError:
        return None
