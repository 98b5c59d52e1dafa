"""The estimate of a call: every part an upstream may bill is counted, by its
documented cost where there is one, else by the length of its JSON; never as zero."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any

import pytest

from gateway.inference.calls import Call, CallKind, parse_call
from gateway.inference.images import IMAGE_MAX_TOKENS, image_size, image_tokens, tiled_tokens
from gateway.inference.problems import InferenceError

USER = {"role": "user", "content": "Hi"}


def chat(**fields: Any) -> Call:
    body = {"model": "m", "messages": [USER], "max_tokens": 10, **fields}
    return parse_call(CallKind.CHAT, json.dumps(body).encode(), 16)


def prompt_of(**fields: Any) -> int:
    return chat(**fields).prompt_tokens


BASE = prompt_of()


def tool(size: int) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "x" * size,
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }


def test_a_plain_call_costs_its_text_and_framing() -> None:
    call = chat()
    assert call.completion_tokens == 10 and call.max_tokens_given
    # "user" + "Hi": 6 characters (2 tokens), 4 for the message, 3 to prime the reply
    assert call.prompt_tokens == 2 + 4 + 3


def test_tools_are_counted_in_proportion_to_their_size() -> None:
    small = prompt_of(tools=[tool(100)])
    large = prompt_of(tools=[tool(40_000)] * 5)
    assert small > BASE + 25
    assert large - BASE >= 5 * 40_000 // 4  # every description's characters, at least


@pytest.mark.parametrize(
    "fields",
    [
        {"functions": [tool(4000)["function"]]},
        {"response_format": {"type": "json_schema", "json_schema": {"schema": {"d": "x" * 4000}}}},
        {"prediction": {"type": "content", "content": "x" * 4000}},
        {"tool_choice": {"type": "function", "function": {"name": "x" * 4000}}},
        {"documents": [{"text": "x" * 4000}]},  # a field the gateway does not know
        {"chat_template_kwargs": {"system": "x" * 4000}},
    ],
    ids=["functions", "response_format", "prediction", "tool_choice", "unknown", "template"],
)
def test_other_billed_fields_are_counted_by_their_json(fields: dict[str, Any]) -> None:
    assert prompt_of(**fields) - BASE >= 1000


def test_sampling_options_are_free() -> None:
    free = {
        "temperature": 0.5,
        "stop": ["x" * 100],
        "logit_bias": {str(n): 1 for n in range(100)},
        "user": "someone",
        "metadata": {"k": "v"},
        "seed": 7,
        "stream_options": {"include_usage": True},
        "stream": True,
    }
    assert prompt_of(**free) == BASE


def test_tool_calls_and_tool_results_are_counted() -> None:
    arguments = json.dumps({"q": "x" * 4000})
    messages = [
        USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "y" * 4000},
        {"role": "assistant", "name": "n" * 400, "content": "z"},
        {
            "role": "assistant",
            "content": None,
            "function_call": {"name": "f", "arguments": arguments},
        },
    ]
    call = parse_call(CallKind.CHAT, json.dumps({"model": "m", "messages": messages}).encode(), 16)
    assert call.prompt_tokens >= (4000 + 4000 + 400 + 4000) // 4
    assert call.completion_tokens == 16 and not call.max_tokens_given


def content(*parts: dict[str, Any]) -> int:
    return prompt_of(messages=[{"role": "user", "content": list(parts)}])


def png(width: int, height: int) -> str:
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    ihdr = (
        struct.pack(">I", 13) + b"IHDR" + header + struct.pack(">I", zlib.crc32(b"IHDR" + header))
    )
    data = b"\x89PNG\r\n\x1a\n" + ihdr + b"\x00" * 64
    return "data:image/png;base64," + base64.b64encode(data).decode()


def jpeg(width: int, height: int) -> str:
    exif = b"\xff\xe1" + struct.pack(">H", 2 + 3000) + b"E" * 3000
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    data = b"\xff\xd8" + exif + sof + b"\x00" * 16
    return "data:image/jpeg;base64," + base64.b64encode(data).decode()


def image(url: str, detail: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"url": url}
    if detail is not None:
        part["detail"] = detail
    return {"type": "image_url", "image_url": part}


def test_images_cost_what_openai_documents() -> None:
    # low detail: 85; 1024 x 1024: scaled to 768 x 768, four tiles; 2048 x 4096: 768 x
    # 1536, six tiles (OpenAI's own examples)
    assert tiled_tokens(1024, 1024) == 85 + 4 * 170
    assert tiled_tokens(2048, 4096) == 85 + 6 * 170
    assert tiled_tokens(100, 100) == 85 + 170
    assert image_tokens(png(4000, 4000), "low") == 85
    assert image_size(png(640, 480)) == (640, 480)
    assert image_size(jpeg(1024, 1024)) == (1024, 1024)
    base = content()
    assert content(image(png(1024, 1024))) - base == 85 + 4 * 170
    assert content(image(jpeg(2048, 4096), "high")) - base == 85 + 6 * 170


@pytest.mark.parametrize(
    "url",
    ["https://example.com/cat.png", "data:image/png;base64,!!!!", "data:image/bmp;base64,Qk0="],
)
def test_an_image_the_gateway_cannot_measure_costs_the_most(url: str) -> None:
    assert image_tokens(url, "auto") == IMAGE_MAX_TOKENS == 85 + 8 * 170
    assert content(image(url)) - content() == IMAGE_MAX_TOKENS


def test_audio_files_and_unknown_parts_are_never_free() -> None:
    base = content()
    second_of_mp3 = base64.b64encode(b"\x00" * 16_000).decode()  # 128 kbit/s
    audio = {"type": "input_audio", "input_audio": {"data": second_of_mp3, "format": "mp3"}}
    assert content(audio) - base >= 10  # 10 tokens a second at the least
    by_id = {"type": "file", "file": {"file_id": "file-abc"}}
    assert content(by_id) - base >= IMAGE_MAX_TOKENS
    inline = {"type": "file", "file": {"file_data": "x" * 40_000, "filename": "a.pdf"}}
    assert content(inline) - base >= 10_000
    assert content({"type": "video_url", "video_url": {"url": "https://v"}}) - base > 0
    assert content({"type": "text", "text": "x" * 400}) - base == 100


def test_completions_reserve_best_of_and_n() -> None:
    body = {"model": "m", "prompt": "hi", "max_tokens": 10, "best_of": 4, "n": 2}
    call = parse_call(CallKind.COMPLETIONS, json.dumps(body).encode(), 16)
    assert call.completion_tokens == 40
    body["best_of"] = 0
    with pytest.raises(InferenceError) as caught:
        parse_call(CallKind.COMPLETIONS, json.dumps(body).encode(), 16)
    assert caught.value.param == "best_of"


def test_embeddings_count_their_input() -> None:
    body = {"model": "m", "input": ["x" * 400, "y" * 40], "dimensions": 8}
    call = parse_call(CallKind.EMBEDDINGS, json.dumps(body).encode(), 16)
    assert (call.prompt_tokens, call.completion_tokens) == (110, 0)
