"""Removing a tenant (the API or the config) and taking a queue from one, over real
HTTP: the old tenant's keys stop at once, its pending work is cancelled or closed, it
is refused while it holds admitted work."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.gateway.access_harness import ADMIN_KEY, Api, chat, config, workload
from tests.support.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration


async def state_of(api: Api, token: str, wid: str, *states: str) -> dict[str, Any]:
    """The workload once it is in one of ``states`` (bounded wait)."""
    deadline = time.monotonic() + 30
    while True:
        body: dict[str, Any] = (await api.call(token, "GET", f"/api/v1/workloads/{wid}")).json()
        if body["state"] in states or time.monotonic() > deadline:
            assert body["state"] in states, body
            return body
        await asyncio.sleep(0.1)


async def delete_tenant(api: Api, token: str, name: str) -> Any:
    """DELETE with the If-Match it needs: the tenant's version as read now (or "1" for
    one that is gone, which gets its 404)."""
    read = await api.call(ADMIN_KEY, "GET", f"/api/v1/admin/tenants/{name}")
    etag = read.headers.get("etag", '"1"')
    return await api.call(token, "DELETE", f"/api/v1/admin/tenants/{name}", **{"If-Match": etag})


def sleeper(seconds: float) -> list[str]:
    return ["/usr/bin/python3", "-c", f"import time; time.sleep({seconds})"]  # in the sandbox


async def test_a_deleted_tenants_keys_stop_at_once(api: Api) -> None:
    member = await api.token("alpha", "bot")
    boss = await api.token("alpha", "boss", roles=["tenant-admin"])
    beta = await api.token("beta", "b-bot")
    assert (await api.call(member, "GET", "/api/v1/workloads")).status_code == 200  # cached now
    too_big = await api.call(member, "POST", "/api/v1/workloads", workload(gpus=5))
    wid = too_big.json()["id"]
    denied = await delete_tenant(api, boss, "alpha")
    assert denied.status_code == 403  # a tenant admin deletes no tenant, not even its own
    deleted = await delete_tenant(api, ADMIN_KEY, "alpha")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {
        "name": "alpha",
        "keys_revoked": 2,
        "principals_disabled": 2,
        "workloads_cancelled": 1,
    }
    for token in (member, boss):
        gone = await api.call(token, "GET", "/api/v1/workloads")
        assert gone.status_code == 401 and gone.json()["error"]["code"] == "revoked_api_key"
    tenants = await api.call(ADMIN_KEY, "GET", "/api/v1/admin/tenants")
    assert [t["name"] for t in tenants.json()["items"]] == ["beta"]
    again = await delete_tenant(api, ADMIN_KEY, "alpha")
    assert again.status_code == 404
    no_key = await api.call(
        ADMIN_KEY, "POST", "/api/v1/admin/tenants/alpha/keys", {"principal": "x"}
    )
    assert no_key.status_code == 404
    assert (await api.call(beta, "GET", "/api/v1/workloads")).status_code == 200
    from tenants.models import WorkloadRow

    async with api.services.database.session() as session:
        row = await session.get(WorkloadRow, wid)
    assert row is not None and row.state == "cancelled"


async def test_a_tenant_with_running_work_is_not_deleted(api: Api) -> None:
    member = await api.token("alpha", "bot")
    body = workload(command=sleeper(60))
    wid = (await api.call(member, "POST", "/api/v1/workloads", body)).json()["id"]
    await state_of(api, member, wid, "admitted", "running")
    busy = await delete_tenant(api, ADMIN_KEY, "alpha")
    assert busy.status_code == 409, busy.text
    assert "admitted or running workloads (train)" in busy.json()["error"]["message"]
    assert (await api.call(member, "GET", "/api/v1/workloads")).status_code == 200
    await api.call(member, "DELETE", f"/api/v1/workloads/{wid}")
    await state_of(api, member, wid, "cancelled")
    assert (await delete_tenant(api, ADMIN_KEY, "alpha")).status_code == 200


async def test_a_tenant_left_out_of_the_config_is_deleted(api: Api, upstream: FakeOpenAI) -> None:
    member = await api.token("alpha", "bot")
    data = config(upstream.base_url)
    data["tenants"] = [t for t in data["tenants"] if t["name"] != "alpha"]
    applied = await api.call(ADMIN_KEY, "POST", "/api/v1/admin/config", data)
    assert applied.json()["deleted"] == ["tenant alpha"]
    assert (await api.call(member, "POST", "/v1/chat/completions", chat())).status_code == 401


async def test_a_queue_moved_to_another_tenant_closes_to_the_old_one(
    api: Api, upstream: FakeOpenAI
) -> None:
    alpha = await api.token("alpha", "bot")
    beta = await api.token("beta", "b-bot")
    assert (await api.call(alpha, "POST", "/v1/chat/completions", chat())).status_code == 200
    first = await api.call(
        alpha, "POST", "/api/v1/workloads", workload("first", gpus=4, command=sleeper(2))
    )
    waiting = await api.call(alpha, "POST", "/api/v1/workloads", workload("waiting", gpus=4))
    first_id, waiting_id = first.json()["id"], waiting.json()["id"]
    await state_of(api, alpha, first_id, "admitted", "running")
    moved = config(upstream.base_url, alpha=[], beta=["team-b", "team-a"])
    assert (await api.call(ADMIN_KEY, "POST", "/api/v1/admin/config", moved)).status_code == 201
    # Alpha can neither submit to the queue nor call models through it.
    submit = await api.call(alpha, "POST", "/api/v1/workloads", workload("late"))
    assert submit.status_code == 403 and "team-a" in submit.text
    call = await api.call(
        alpha, "POST", "/v1/chat/completions", chat(), **{"X-Ignara-Queue": "team-a"}
    )
    assert call.status_code in (403, 404), call.text
    through = await api.call(
        beta, "POST", "/v1/chat/completions", chat(), **{"X-Ignara-Queue": "team-a"}
    )
    assert through.status_code == 200, through.text
    # Its pending workload there says why it waits, and is passed over: once the first
    # one is done, beta's later workload gets the queue, alpha's older one does not.
    closed = await state_of(api, alpha, waiting_id, "pending")
    assert closed["reason"]["code"] == "QueueClosed", closed
    await state_of(api, alpha, first_id, "succeeded")
    later = await api.call(beta, "POST", "/api/v1/workloads", workload("later", gpus=4))
    assert later.status_code == 201, later.text
    await state_of(api, beta, later.json()["id"], "admitted", "running", "succeeded")
    still = await state_of(api, alpha, waiting_id, "pending")
    assert still["reason"]["code"] == "QueueClosed"
    assert "no longer open to tenant 'alpha'" in still["reason"]["message"]
