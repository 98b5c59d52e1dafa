"""A key's own token limits, over real HTTP in front of a fake OpenAI upstream: set at
issue and shown with the key, checked (422 naming the field), changed only by whoever
may revoke the key, and enforced on inference: a runaway key gets a 429 of its own
while another key of the same tenant is still served from the queue."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.settings import InferenceSettings, Settings
from tests.gateway.access_harness import ADMIN_KEY, Api, chat, running
from tests.support.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration

KEYS = "/api/v1/admin/tenants/alpha/keys"


@pytest.fixture(params=["memory", "redis"])
async def limited_api(
    request: pytest.FixtureRequest, settings: Settings, upstream: FakeOpenAI
) -> AsyncIterator[Api]:
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    inference = InferenceSettings(
        redis_url=redis_url, ledger_prefix=f"test-{uuid.uuid4().hex}", health_interval=3600
    )
    async with running(dataclasses.replace(settings, inference=inference), upstream) as api:
        yield api


async def limited_key(api: Api, principal: str, limits: dict[str, Any]) -> dict[str, Any]:
    made = await api.call(ADMIN_KEY, "POST", KEYS, {"principal": principal, "limits": limits})
    assert made.status_code == 201, made.text
    answer: dict[str, Any] = made.json()
    return answer


def error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()["error"]
    return body


async def test_a_runaway_key_hits_its_own_limit_and_its_tenant_is_still_served(
    limited_api: Api,
) -> None:
    api = limited_api
    runaway = await limited_key(api, "runaway", {"tokens-per-minute": 60})
    assert runaway["limits"] == {"tokens-per-minute": 60}
    sibling = await api.token("alpha", "sibling")
    answers = [await api.call(runaway["token"], "POST", "/v1/chat/completions", chat())]
    while answers[-1].status_code == 200 and len(answers) < 40:
        answers.append(await api.call(runaway["token"], "POST", "/v1/chat/completions", chat()))
    refused = error(answers[-1], 429)
    assert len(answers) > 2  # served until its own minute was spent
    assert refused["code"] == "key_limit_exceeded"
    detail = refused["ignara"]
    assert (detail["level"], detail["key"], detail["resource"]) == (
        "Key",
        runaway["key_id"],
        "tokens-per-minute",
    )
    assert detail["limit"] == 60 and detail["retry_after_seconds"] > 0
    assert int(answers[-1].headers["retry-after"]) >= 1
    assert answers[-1].headers["x-ignara-ratelimit-scope"] == f"api-key {runaway['key_id']}"
    # the queue's quota is untouched by the refusals: another key of alpha is served
    ledger = api.services.inference.ledger
    before = await ledger.usage("team-a", "llama", "tokens-per-minute")
    served = await api.call(sibling, "POST", "/v1/chat/completions", chat())
    assert served.status_code == 200, served.text
    assert int(served.headers["x-ratelimit-remaining-tokens"]) > 100_000 - 1000
    assert before < 1000
    assert await ledger.key_usage(runaway["key_id"], "tokens-per-minute") <= 60
    # lifted by a platform admin, the key is the queue's alone again (within the
    # cache's life on other replicas; at once on this one)
    lifted = await api.call(
        ADMIN_KEY, "PATCH", f"{KEYS}/{runaway['key_id']}", {"limits": {"tokens-per-minute": None}}
    )
    assert lifted.status_code == 200 and lifted.json()["limits"] == {}
    again = await api.call(runaway["token"], "POST", "/v1/chat/completions", chat())
    assert again.status_code == 200, again.text


async def test_a_call_larger_than_its_key_may_ever_hold_is_a_400(limited_api: Api) -> None:
    tiny = await limited_key(limited_api, "tiny", {"tokens-per-day": 20})
    body = {**chat(), "max_tokens": 500}
    refused = error(
        await limited_api.call(tiny["token"], "POST", "/v1/chat/completions", body), 400
    )
    assert refused["code"] == "exceeds_key_limit"
    assert refused["ignara"]["resource"] == "tokens-per-day"


async def test_limits_are_checked_and_the_field_is_named(api: Api) -> None:
    for limits, field in (
        ({"tokens-per-minute": 0}, "limits.tokens-per-minute"),
        ({"tokens-per-minute": -5}, "limits.tokens-per-minute"),
        ({"tokens-per-day": 10**13}, "limits.tokens-per-day"),
        ({"tokens-per-day": "lots"}, "limits.tokens-per-day"),
        ({"tokens-per-day": True}, "limits.tokens-per-day"),
        ({"tokens-per-day": 1.5}, "limits.tokens-per-day"),
        ({"requests-per-minute": 5}, "limits.requests-per-minute"),
        ([1, 2], "limits"),
        ("many", "limits"),
    ):
        body = {"principal": "bot", "limits": limits}
        refused = error(await api.call(ADMIN_KEY, "POST", KEYS, body), 422)
        assert refused["message"].startswith(field), (limits, refused)
    made = await api.key("alpha", "bot")
    assert made["limits"] == {}
    patch = f"{KEYS}/{made['key_id']}"
    refused = error(
        await api.call(ADMIN_KEY, "PATCH", patch, {"limits": {"tokens-per-minute": 0}}), 422
    )
    assert refused["message"].startswith("limits.tokens-per-minute")
    changed = await api.call(
        ADMIN_KEY, "PATCH", patch, {"limits": {"tokens-per-minute": 5, "tokens-per-day": 50}}
    )
    assert changed.json()["limits"] == {"tokens-per-minute": 5, "tokens-per-day": 50}
    shown = await api.call(ADMIN_KEY, "GET", patch)
    assert shown.json()["limits"] == {"tokens-per-minute": 5, "tokens-per-day": 50}
    listed = await api.call(ADMIN_KEY, "GET", KEYS)
    assert {k["key_id"]: k["limits"] for k in listed.json()}[made["key_id"]] == {
        "tokens-per-minute": 5,
        "tokens-per-day": 50,
    }


async def test_only_who_may_revoke_a_key_may_change_its_limits(api: Api) -> None:
    boss = await api.key("alpha", "boss", roles=["tenant-admin"])
    member = await api.key("alpha", "worker")
    capped = await api.call(
        boss["token"], "PATCH", f"{KEYS}/{member['key_id']}", {"limits": {"tokens-per-day": 100}}
    )
    assert capped.status_code == 200, capped.text
    raise_it = {"limits": {"tokens-per-day": 10**9}}
    # the member cannot raise (or lift) its own key's limit
    for body in (raise_it, {"limits": {"tokens-per-day": None}}):
        error(await api.call(member["token"], "PATCH", f"{KEYS}/{member['key_id']}", body), 403)
    # a tenant admin cannot reach another tenant's key, by its path or its own
    beta = await api.key("beta", "b-bot")
    beta_keys = "/api/v1/admin/tenants/beta/keys"
    refused = error(
        await api.call(boss["token"], "PATCH", f"{beta_keys}/{beta['key_id']}", raise_it), 403
    )
    assert 'tenant "beta"' in refused["message"]
    error(await api.call(boss["token"], "PATCH", f"{KEYS}/{beta['key_id']}", raise_it), 404)
    # nor a peer tenant admin's key, nor its own, nor any key through the platform route
    peer = await api.key("alpha", "peer", roles=["tenant-admin"])
    for victim in (peer, boss):
        error(await api.call(boss["token"], "PATCH", f"{KEYS}/{victim['key_id']}", raise_it), 403)
    error(
        await api.call(boss["token"], "PATCH", f"/api/v1/admin/keys/{beta['key_id']}", raise_it),
        403,
    )
    # and nothing changed
    listed = {k["key_id"]: k["limits"] for k in (await api.call(ADMIN_KEY, "GET", KEYS)).json()}
    assert listed[member["key_id"]] == {"tokens-per-day": 100}
    assert listed[boss["key_id"]] == listed[peer["key_id"]] == {}
    beta_listed = (await api.call(ADMIN_KEY, "GET", beta_keys)).json()
    assert [k["limits"] for k in beta_listed] == [{}]
    # the platform admin may change any key
    done = await api.call(ADMIN_KEY, "PATCH", f"/api/v1/admin/keys/{beta['key_id']}", raise_it)
    assert done.status_code == 200 and done.json()["limits"] == {"tokens-per-day": 10**9}
    # a tenant admin creates a member key with limits of its own choosing
    made = await api.call(
        boss["token"], "POST", KEYS, {"principal": "intern", "limits": {"tokens-per-minute": 9}}
    )
    assert made.status_code == 201 and made.json()["limits"] == {"tokens-per-minute": 9}
