"""One OpenAI-style call as the gateway sees it: checked, estimated, ready to forward.

The gateway reads only what it needs (model, stream flags, token bounds and the
size of the input); everything else passes through to the upstream untouched. A
body is re-encoded only to ask a streaming upstream for its usage chunk.

The estimate counts every part of the body an upstream may bill as input, without a
tokenizer: text at about four characters a token plus a few tokens of framing per
message, images by OpenAI's documented cost (:mod:`gateway.inference.images`),
audio as if it were at a low bit rate, and everything else it does not measure
(tools and function schemas, tool calls, ``response_format``, ``prediction``,
files, fields it does not know) by the length of its JSON, which is never less than
its text (a content part of a kind it does not know, a file or a video, at least
what an image may cost). Only the sampling and output options in
:data:`UNBILLED_FIELDS` are free.
Reconciling with the upstream's own count corrects the estimate after the call
(and :mod:`gateway.inference.estimates` learns from it for the next calls).

The output is reserved at the largest bound the call names (``max_tokens`` or
``max_completion_tokens``, an upstream may honour either) x the completions asked
for. A call that names neither is forwarded with ``max_tokens`` set to what was
reserved for it (``cap_output``), so the upstream cannot write more than that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

import msgspec

from gateway.inference.images import IMAGE_MAX_TOKENS, image_tokens
from gateway.inference.problems import InferenceError

__all__ = ["Call", "CallKind", "estimate_text_tokens", "json_tokens", "parse_call"]

MAX_MODEL_CHARS = 256
MAX_MESSAGES = 10_000
MAX_TOKENS_CAP = 1_000_000
MAX_CHOICES = 128
CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4  # a message's role and framing
REPLY_PRIMING_TOKENS = 3  # every reply is primed with a few tokens
# Input audio at 10 tokens a second (OpenAI's audio models), as if it were 8 kbit/s
# (compressed) or 8 kHz 8-bit PCM (WAV): bytes a token, fewer than real audio has.
AUDIO_BYTES_PER_TOKEN = 100
WAV_BYTES_PER_TOKEN = 800
# Request fields no upstream bills as input: model and sampling or output options.
UNBILLED_FIELDS = frozenset(
    {
        "model",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "best_of",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "seed",
        "stop",
        "user",
        "store",
        "metadata",
        "parallel_tool_calls",
        "service_tier",
        "reasoning_effort",
        "verbosity",
        "modalities",
        "echo",
        "dimensions",
        "encoding_format",
        "safety_identifier",
        "prompt_cache_key",
    }
)

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


class CallKind(Enum):
    CHAT = "/chat/completions"
    COMPLETIONS = "/completions"
    EMBEDDINGS = "/embeddings"

    @property
    def path(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Call:
    kind: CallKind
    model: str
    stream: bool
    wants_usage_chunk: bool  # the client itself asked for stream_options.include_usage
    prompt_tokens: int  # estimated
    completion_tokens: int  # reserved: max_tokens x n (0 for embeddings)
    body: bytes  # what goes upstream
    max_tokens_given: bool = True  # False: completion_tokens came from the default

    @property
    def estimate(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def parse_call(
    kind: CallKind, raw: bytes, default_max_tokens: int, *, cap_output: bool = True
) -> Call:
    """Check the fields the gateway relies on; raises :class:`InferenceError` (400).
    ``cap_output``: forward a call that names no output bound with ``max_tokens`` set
    to the default reserved for it."""
    try:
        body = _decoder.decode(raw)
    except msgspec.DecodeError:
        raise _invalid("the body is not valid JSON", None) from None
    except UnicodeDecodeError as err:  # msgspec checks the UTF-8 of every string it decodes
        raise _invalid(f"the body is not valid UTF-8 (byte {err.start})", None) from None
    except RecursionError:  # msgspec's own bound: the interpreter's recursion limit
        raise _invalid("the body nests arrays or objects too deeply", None) from None
    if not isinstance(body, dict):
        raise _invalid("the body must be a JSON object", None)
    model = body.get("model")
    if not isinstance(model, str) or not model or len(model) > MAX_MODEL_CHARS:
        raise _invalid("'model' must be a non-empty string", "model")
    if kind is CallKind.EMBEDDINGS:
        prompt = _input_tokens(body, "input") + _other_fields(body, "input")
        return Call(kind, model, False, False, prompt, 0, raw)
    if kind is CallKind.CHAT:
        prompt = _chat_tokens(body.get("messages")) + _other_fields(body, "messages")
    else:
        prompt = _input_tokens(body, "prompt") + _other_fields(body, "prompt")
    limit, given = _output_limit(body, default_max_tokens)
    completion = limit * _choices(body)
    stream = _flag(body, "stream")
    wants_usage = stream and _wants_usage(body)
    changed = False
    if stream and not wants_usage:
        options = body.get("stream_options") or {}
        body["stream_options"] = {**options, "include_usage": True}
        changed = True
    if cap_output and not given:
        # Unbounded, an upstream writes until the model stops or its context ends:
        # past what was reserved. Bounded, it stops there (if it honours the field).
        body["max_tokens"] = limit
        changed = True
    if changed:
        raw = _encoder.encode(body)
    return Call(kind, model, stream, wants_usage, prompt, completion, raw, given)


def estimate_text_tokens(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


def json_tokens(value: Any) -> int:
    """What the gateway does not measure otherwise: its JSON text's length / 4."""
    return estimate_text_tokens(len(_encoder.encode(value)))


def _other_fields(body: dict[str, Any], input_field: str) -> int:
    """Every top-level field but the input (counted apart) and the unbilled options."""
    tokens = 0
    for name, value in body.items():
        if name not in UNBILLED_FIELDS and name != input_field:
            tokens += json_tokens(value)
    return tokens


def _chat_tokens(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise _invalid("'messages' must be a non-empty array", "messages")
    if len(messages) > MAX_MESSAGES:
        raise _invalid(f"'messages' holds more than {MAX_MESSAGES} messages", "messages")
    chars = 0
    tokens = REPLY_PRIMING_TOKENS + TOKENS_PER_MESSAGE * len(messages)
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _invalid("each message must be an object with a 'role'", "messages")
        for name, value in message.items():
            if isinstance(value, str):  # role, content, name, tool_call_id, refusal
                chars += len(value)
            elif name == "content":
                if isinstance(value, list):
                    tokens += _parts_tokens(value)
                elif value is not None:
                    raise _invalid("a message's 'content' must be a string or an array", "messages")
            elif value is not None:  # tool_calls, function_call, audio, ...
                tokens += json_tokens(value)
    return estimate_text_tokens(chars) + tokens


def _parts_tokens(parts: list[Any]) -> int:
    chars = 0
    tokens = 0
    for part in parts:
        if not isinstance(part, dict):
            tokens += _unknown_part_tokens(part)
            continue
        kind = part.get("type")
        text = part.get("text", part.get("refusal"))
        if isinstance(text, str) and kind in ("text", "refusal", None):
            chars += len(text)
        elif kind == "image_url":
            image = part.get("image_url")
            if isinstance(image, dict):
                tokens += image_tokens(image.get("url"), image.get("detail"))
            else:  # a bare URL, as some servers take it
                tokens += image_tokens(image, None)
        elif kind == "input_audio" and isinstance(audio := part.get("input_audio"), dict):
            tokens += _audio_tokens(audio)
        else:
            tokens += _unknown_part_tokens(part)
    return estimate_text_tokens(chars) + tokens


def _unknown_part_tokens(part: Any) -> int:
    """A file, a video or any part it does not know: its JSON's length, and at least
    what an image can cost (a file or a video named by reference is short)."""
    return max(json_tokens(part), IMAGE_MAX_TOKENS)


def _audio_tokens(audio: dict[str, Any]) -> int:
    data = audio.get("data")
    if not isinstance(data, str):
        return json_tokens(audio)
    per_token = WAV_BYTES_PER_TOKEN if audio.get("format") == "wav" else AUDIO_BYTES_PER_TOKEN
    return max(1, math.ceil(len(data) * 3 / 4 / per_token))


def _input_tokens(body: dict[str, Any], field: str) -> int:
    """``prompt`` / ``input``: a string, strings, token ids, or arrays of token ids."""
    value = body.get(field)
    if isinstance(value, str):
        return estimate_text_tokens(len(value))
    if isinstance(value, list) and value:
        if all(isinstance(item, str) for item in value):
            return sum(estimate_text_tokens(len(item)) for item in value)
        if all(_is_token_id(item) for item in value):
            return len(value)
        if all(isinstance(item, list) and all(map(_is_token_id, item)) for item in value):
            return sum(len(item) for item in value)
    raise _invalid(f"'{field}' must be a string, an array of strings, or token ids", field)


def _output_limit(body: dict[str, Any], default: int) -> tuple[int, bool]:
    """The tokens one completion may write: the largest of ``max_tokens`` and
    ``max_completion_tokens`` (an upstream may honour either), else the default; and
    whether the caller named one."""
    limit, given = default, False
    for field in ("max_completion_tokens", "max_tokens"):
        value = body.get(field)
        if value is None:
            continue
        if not _is_whole(value) or not 1 <= value <= MAX_TOKENS_CAP:
            raise _invalid(f"'{field}' must be an integer from 1 to {MAX_TOKENS_CAP}", field)
        limit = max(limit, int(value)) if given else int(value)
        given = True
    return limit, given


def _choices(body: dict[str, Any]) -> int:
    """The completions generated: ``n``, or a legacy completion's ``best_of``."""
    choices = _count(body, "n")
    if "best_of" in body:
        choices = max(choices, _count(body, "best_of"))
    return choices


def _count(body: dict[str, Any], field: str) -> int:
    value = body.get(field)
    if value is None:
        return 1
    if not _is_whole(value) or not 1 <= value <= MAX_CHOICES:
        raise _invalid(f"'{field}' must be an integer from 1 to {MAX_CHOICES}", field)
    return int(value)


def _wants_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise _invalid("'stream_options' must be an object", "stream_options")
    return _flag(options, "include_usage")


def _flag(body: dict[str, Any], field: str) -> bool:
    value = body.get(field)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _invalid(f"'{field}' must be a boolean", field)
    return value


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_token_id(value: Any) -> bool:
    return _is_whole(value) and value >= 0


def _invalid(message: str, param: str | None) -> InferenceError:
    return InferenceError(400, "invalid_request_error", message, param=param)
