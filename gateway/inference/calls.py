"""One OpenAI-style call as the gateway sees it: checked, estimated, ready to forward.

The gateway reads only what it needs (model, stream flags, token bounds and the
prompt's size); everything else passes through to the upstream untouched. A body
is re-encoded only to ask a streaming upstream for its usage chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

import msgspec

from gateway.inference.problems import InferenceError

__all__ = ["Call", "CallKind", "estimate_text_tokens", "parse_call"]

MAX_MODEL_CHARS = 256
MAX_MESSAGES = 10_000
MAX_TOKENS_CAP = 1_000_000
MAX_CHOICES = 128
# A rough, tokenizer-free estimate: about four characters per token for English text,
# plus the few tokens each chat message costs for its role and framing. Reconciling
# with the upstream's own count corrects it after the call.
CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4
TOKENS_PER_NON_TEXT_PART = 85  # an image at low detail, an audio or file part

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

    @property
    def estimate(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def parse_call(kind: CallKind, raw: bytes, default_max_tokens: int) -> Call:
    """Check the fields the gateway relies on; raises :class:`InferenceError` (400)."""
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
        return Call(kind, model, False, False, _input_tokens(body, "input"), 0, raw)
    prompt = (
        _chat_tokens(body.get("messages"))
        if kind is CallKind.CHAT
        else _input_tokens(body, "prompt")
    )
    completion = _completion_tokens(body, default_max_tokens)
    stream = _flag(body, "stream")
    wants_usage = stream and _wants_usage(body)
    if stream and not wants_usage:
        options = body.get("stream_options") or {}
        body["stream_options"] = {**options, "include_usage": True}
        raw = _encoder.encode(body)
    return Call(kind, model, stream, wants_usage, prompt, completion, raw)


def estimate_text_tokens(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


def _chat_tokens(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise _invalid("'messages' must be a non-empty array", "messages")
    if len(messages) > MAX_MESSAGES:
        raise _invalid(f"'messages' holds more than {MAX_MESSAGES} messages", "messages")
    chars = 0
    extra = 3  # every reply is primed with a few tokens
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _invalid("each message must be an object with a 'role'", "messages")
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                text = part.get("text") if isinstance(part, dict) else None
                if isinstance(text, str):
                    chars += len(text)
                else:
                    extra += TOKENS_PER_NON_TEXT_PART
        elif content is not None:
            raise _invalid("a message's 'content' must be a string or an array", "messages")
        extra += TOKENS_PER_MESSAGE
    return estimate_text_tokens(chars) + extra


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


def _completion_tokens(body: dict[str, Any], default: int) -> int:
    limit = default
    for field in ("max_completion_tokens", "max_tokens"):
        value = body.get(field)
        if value is None:
            continue
        if not _is_whole(value) or not 1 <= value <= MAX_TOKENS_CAP:
            raise _invalid(f"'{field}' must be an integer from 1 to {MAX_TOKENS_CAP}", field)
        limit = value
        break
    choices = body.get("n", 1)
    if choices is None:
        choices = 1
    if not _is_whole(choices) or not 1 <= choices <= MAX_CHOICES:
        raise _invalid(f"'n' must be an integer from 1 to {MAX_CHOICES}", "n")
    return int(limit) * int(choices)


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
