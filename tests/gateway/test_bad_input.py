"""Hostile input over real HTTP, on every JSON route (the ``/v1`` calls' own ASGI front
included): bodies nested 10,000 deep, invalid UTF-8, NUL characters, odd bytes in
headers, query strings and cursors. Each is a 4xx with the JSON error body naming
what is wrong; none is a 500, and nothing reaches the upstream."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway.errors import ApiError
from gateway.json_bodies import MAX_JSON_DEPTH, check_document
from gateway.settings import Settings
from tests.gateway.test_workload_api import workload as gang
from tests.inference.test_v1_api import Gateway, running_gateway
from tests.support.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration

# (method, path, who): every route that reads a JSON body.
JSON_ROUTES = [
    ("POST", "/api/v1/workloads", "alpha"),
    ("POST", "/api/v1/admin/config", "admin"),
    ("PUT", "/api/v1/admin/models/some-model", "admin"),
    ("POST", "/api/v1/admin/tenants/alpha/keys", "admin"),
    ("POST", "/v1/chat/completions", "alpha"),
    ("POST", "/v1/completions", "alpha"),
    ("POST", "/v1/embeddings", "alpha"),
]
DEEP = 10_000


def workload(name: str = "train", **overrides: Any) -> dict[str, Any]:
    """A workload the inference config's queues take: it requests no GPU."""
    return gang(name, pod_sets=[{"name": "w", "count": 1, "requests": {}}], **overrides)


@pytest.fixture
async def gateway(settings: Settings) -> AsyncIterator[Gateway]:
    async with (
        FakeOpenAI(models=("fake-model", "fake-embed"), completion_tokens=5) as upstream,
        running_gateway(settings, upstream, None) as gateway,
    ):
        yield gateway


@pytest.fixture
async def http(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
        yield client


def auth(gateway: Gateway, who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {gateway.keys[who]}", "Content-Type": "application/json"}


def assert_client_error(response: httpx.Response, *words: str) -> dict[str, Any]:
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    error: dict[str, Any] = response.json()["error"]
    assert isinstance(error["code"], str) and error["code"]
    assert error["type"] == "invalid_request_error"
    for word in words:
        assert word in error["message"], error
    return error


async def send_everywhere(gateway: Gateway, http: httpx.AsyncClient, body: bytes) -> None:
    """``body`` to every JSON route: a 400 each time, and nothing forwarded upstream."""
    for method, path, who in JSON_ROUTES:
        response = await http.request(method, path, content=body, headers=auth(gateway, who))
        assert response.status_code == 400, (path, response.text)
        assert_client_error(response)
    assert gateway.upstream.total_requests == 0


@pytest.mark.parametrize(
    "body",
    [
        b"[" * DEEP + b"]" * DEEP,
        b'{"a":' * DEEP + b"1" + b"}" * DEEP,
        b'{"model": "fake-model", "messages": ' + b"[" * DEEP + b"]" * DEEP + b"}",
    ],
    ids=["arrays", "objects", "inside-a-call"],
)
async def test_deeply_nested_json_is_a_400(
    gateway: Gateway, http: httpx.AsyncClient, body: bytes
) -> None:
    await send_everywhere(gateway, http, body)
    response = await http.post("/api/v1/workloads", content=body, headers=auth(gateway, "alpha"))
    assert_client_error(response, "nests", str(MAX_JSON_DEPTH))
    response = await http.post("/v1/embeddings", content=body, headers=auth(gateway, "alpha"))
    assert_client_error(response, "nests")


@pytest.mark.parametrize(
    "body",
    [
        b'{"name": "tr\xffin", "model": "fake-model", "principal": "a"}',  # inside a string
        b'{"\xc3\x28": 1}',  # a truncated sequence, in a key
        b'{"model": "fake-model", "input": "\xed\xa0\x80"}',  # an encoded surrogate
        b'\xef\xbb\xbf{"model": "fake-model"}',  # a byte-order mark before the document
        b'{"model": "fake-model"}\xff',  # after it
    ],
    ids=["in-string", "in-key", "surrogate", "bom", "trailing"],
)
async def test_invalid_utf8_is_a_400(
    gateway: Gateway, http: httpx.AsyncClient, body: bytes
) -> None:
    await send_everywhere(gateway, http, body)


NUL_CASES = [
    ("POST", "/api/v1/workloads", "alpha", workload(job={"command": ["a\x00b"]}), "job.command[0]"),
    ("POST", "/api/v1/admin/config", "admin", {"tenants": [{"name": "x\x00"}]}, "tenants[0].name"),
    ("PUT", "/api/v1/admin/models/m", "admin", {"flavor": "llama\x00"}, "flavor"),
    ("POST", "/api/v1/admin/tenants/alpha/keys", "admin", {"scopes": ["\x00"]}, "scopes[0]"),
    ("POST", "/api/v1/workloads", "alpha", {"job": {"\x00": 1}}, "job, in a key"),
]


@pytest.mark.parametrize(("method", "path", "who", "body", "field"), NUL_CASES)
async def test_nul_characters_are_refused_naming_the_field(
    gateway: Gateway,
    http: httpx.AsyncClient,
    method: str,
    path: str,
    who: str,
    body: Any,
    field: str,
) -> None:
    response = await http.request(method, path, json=body, headers=auth(gateway, who))
    assert response.status_code == 400, response.text
    assert_client_error(response, field, "NUL")


async def test_odd_bytes_in_headers_are_no_500(gateway: Gateway, http: httpx.AsyncClient) -> None:
    member = list(auth(gateway, "alpha").items())
    key = [*member, ("Idempotency-Key", b"\xff\xfe run")]
    first = await http.post("/api/v1/workloads", json=workload(), headers=key)
    again = await http.post("/api/v1/workloads", json=workload(), headers=key)
    assert (first.status_code, again.status_code) == (201, 200), first.text
    assert first.json()["id"] == again.json()["id"]
    too_long = await http.post(
        "/api/v1/workloads", json=workload(), headers=[*member, ("Idempotency-Key", "k" * 256)]
    )
    assert_client_error(too_long, "Idempotency-Key")
    empty = await http.post(
        "/api/v1/workloads", json=workload(), headers=[*member, ("Idempotency-Key", "")]
    )
    assert_client_error(empty, "Idempotency-Key")
    chat = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
    queue = [*member, ("X-Ignara-Queue", b"\xff\x80")]
    response = await http.post("/v1/chat/completions", json=chat, headers=queue)
    assert response.status_code == 403 and response.json()["error"]["code"] == "policy_denied"
    assert gateway.upstream.total_requests == 0
    priority = [*member, ("X-Ignara-Priority", b"\xff")]
    response = await http.post("/v1/chat/completions", json=chat, headers=priority)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_priority"
    assert gateway.upstream.total_requests == 0


@pytest.mark.parametrize(
    "cursor",
    [
        "2020-01-01T00:00:00|" + "a" * 32,  # naive
        "0000-01-01T00:00:00Z|" + "a" * 32,  # year 0
        "9999-12-31T23:59:59-01:00|" + "a" * 32,  # past year 9999 in UTC
        "0001-01-01T00:00:00+01:00|" + "a" * 32,  # before year 1 in UTC
        "99999-01-01T00:00:00Z|" + "a" * 32,
        "1795612979123456789|" + "a" * 32,  # a timestamp, and an overflowing one
        "2020-01-01T00:00:00Z|x",  # not a workload id
        "2020-01-01T00:00:00Z",
        "garbage",
        "%ff%fe|%00",
        "2020-13-45T25:61:61Z|" + "a" * 32,
    ],
)
async def test_bad_cursors_are_a_400(
    gateway: Gateway, http: httpx.AsyncClient, cursor: str
) -> None:
    response = await http.get(f"/api/v1/workloads?cursor={cursor}", headers=auth(gateway, "alpha"))
    assert response.status_code == 400, response.text
    assert_client_error(response, "cursor")


async def test_cursors_page_through_the_workloads(
    gateway: Gateway, http: httpx.AsyncClient
) -> None:
    member = auth(gateway, "alpha")
    made = [
        (await http.post("/api/v1/workloads", json=workload(f"w{i}"), headers=member)).json()["id"]
        for i in range(3)
    ]
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params = {"limit": "2"} | ({"cursor": cursor} if cursor else {})
        page = (await http.get("/api/v1/workloads", params=params, headers=member)).json()
        seen += [w["id"] for w in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert "+" not in cursor  # safe in a query string as it is
    assert seen == made


async def test_allow_lists_each_paths_documented_methods(http: httpx.AsyncClient) -> None:
    """OPTIONS and a 405 both say what the OpenAPI document says a path takes."""
    document = (await http.get("/schema/openapi.json")).json()
    for template, item in document["paths"].items():
        path = re.sub(r"\{[^}]+\}", "a" * 32, template)
        documented = {method.upper() for method in item if method != "parameters"}
        refused = await http.request("TRACE", path)  # a method no path takes
        assert refused.status_code == 405, (path, refused.text)
        assert refused.json()["error"]["code"] == "method_not_allowed"
        allowed = {m.strip() for m in refused.headers["allow"].split(",")}
        assert allowed - {"OPTIONS"} == documented, path
        if template.startswith("/v1/") and template != "/v1/models":
            continue  # the calls' own front takes POST only, OPTIONS included
        options = await http.options(path)
        assert options.status_code == 204, (path, options.text)
        assert {m.strip() for m in options.headers["allow"].split(",")} == allowed, path


def test_the_nesting_bound_is_exact() -> None:
    def nested(depth: int) -> Any:
        document: Any = 1
        for _ in range(depth):
            document = {"a": [document]} if depth % 2 else [document]
        return document

    check_document(nested(MAX_JSON_DEPTH))
    with pytest.raises(ApiError, match="nests"):
        check_document(nested(MAX_JSON_DEPTH + 1))
