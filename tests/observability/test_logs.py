"""Structured logs: one JSON line per event, access lines with tenant, key, model and
tokens; never a key's token, and no prompt unless prompt logging is on."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.observability.logs import Events, Scrubber
from gateway.settings import ObservabilitySettings, ServerSettings, Settings
from tests.conftest import ADMIN_KEY
from tests.inference.test_v1_api import running_gateway
from tests.observability.support import captured_logs
from tests.support.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration

SECRET_PROMPT = "the-launch-code-is-swordfish-4711"


@pytest.fixture
async def upstream() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(models=("fake-model",), completion_tokens=5) as fake:
        yield fake


def logged(settings: Settings, *, prompts: bool = False) -> Settings:
    return dataclasses.replace(
        settings,
        server=ServerSettings(access_log=True),
        observability=ObservabilitySettings(log_prompts=prompts),
    )


async def test_a_keys_token_never_reaches_a_log_line(
    settings: Settings, upstream: FakeOpenAI
) -> None:
    settings = logged(settings)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with captured_logs(settings) as logs:
        async with running_gateway(settings, upstream, None) as gateway:
            async with httpx.AsyncClient(base_url=gateway.url) as http:
                made = await http.post(
                    "/api/v1/admin/tenants/alpha/keys",
                    json={"principal": "logger-bot", "roles": ["member"]},
                    headers=admin,
                )
                assert made.status_code == 201
                token, key_id = made.json()["token"], made.json()["key_id"]
                chat = {
                    "model": "fake-model",
                    "messages": [{"role": "user", "content": SECRET_PROMPT}],
                    "max_tokens": 20,
                }
                bearer = {"Authorization": f"Bearer {token}"}
                served = await http.post("/v1/chat/completions", json=chat, headers=bearer)
                assert served.status_code == 200
                # A bad key in the header is not written either.
                wrong = {"Authorization": f"Bearer {token}x"}
                refused = await http.post("/v1/chat/completions", json=chat, headers=wrong)
                assert refused.status_code == 401
                revoked = await http.delete(
                    f"/api/v1/admin/tenants/alpha/keys/{key_id}", headers=admin
                )
                assert revoked.status_code == 200
                after = await http.post("/v1/chat/completions", json=chat, headers=bearer)
                assert after.status_code == 401
            await gateway.settled()
    text = logs.text
    assert token not in text and token[-20:] not in text
    assert ADMIN_KEY not in text
    assert SECRET_PROMPT not in text
    assert "pepper" not in text.lower() or settings.auth.pepper not in text

    created = logs.events("key.created")
    assert [e["key_id"] for e in created if e["principal"] == "logger-bot"] == [key_id]
    assert [e["key_id"] for e in logs.events("key.revoked")] == [key_id]
    access = [
        line
        for line in logs.events("http.request")
        if line["route"] == "/v1/chat/completions" and line["status"] == 200
    ]
    assert len(access) == 1
    line = access[0]
    assert line["tenant"] == "alpha" and line["key_id"] == key_id
    assert line["model"] == "fake-model" and line["queue"] == "team-a"
    assert line["completion_tokens"] == 5 and line["prompt_tokens"] > 0
    assert "prompt" not in line
    assert logs.events("config.reloaded")


async def test_prompts_are_logged_only_when_asked(settings: Settings, upstream: FakeOpenAI) -> None:
    settings = logged(settings, prompts=True)
    with captured_logs(settings) as logs:
        async with running_gateway(settings, upstream, None) as gateway:
            await gateway.client("alpha").chat.completions.create(
                model="fake-model",
                messages=[{"role": "user", "content": SECRET_PROMPT}],
                max_tokens=20,
            )
    (line,) = [e for e in logs.events("http.request") if e["route"] == "/v1/chat/completions"]
    assert SECRET_PROMPT in line["prompt"]


def test_the_scrubber_cuts_secrets_out_of_any_field() -> None:
    scrub = Scrubber(["super-secret-pepper"])
    token = "ign_live_0123456789abcdef_c2VjcmV0LXNlY3JldC1zZWNyZXQ"
    event = scrub(
        None,
        "info",
        {
            "event": f"saw {token} and super-secret-pepper",
            "token": token,
            "headers": {"Authorization": "Bearer abc", "x": [f"Bearer {token}"]},
            "messages": [{"content": "hi"}],
        },
    )
    text = repr(event)
    assert token not in text and "super-secret-pepper" not in text and "abc" not in text
    assert "messages" not in event


def test_events_cost_nothing_below_their_level() -> None:
    events = Events("ignara.test-quiet")
    events.logger.setLevel("WARNING")
    assert not events.enabled
    events.info("nothing", token="ign_live_x")  # filtered before any processing
