"""Who may do what, attacked over real HTTP as a hostile tenant would: keys carry their
own roles and scopes, a tenant admin issues and revokes member keys of its own tenant
only, the platform role lives on platform keys only, and every route checks the scope
its action needs."""

from __future__ import annotations

from typing import Any

import pytest

from tests.gateway.access_harness import ADMIN_KEY, Api, chat, config, workload
from tests.support.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration

TENANT_SCOPES = ["inference", "workloads:read", "workloads:write", "usage:read"]
KEY_SCOPES = ["keys:read", "keys:write"]


def refused(response: Any, *words: str, status: int = 403) -> None:
    assert response.status_code == status, response.text
    message = response.json()["error"]["message"]
    for word in words:
        assert word in message, message


async def test_a_usage_reader_reads_usage_and_nothing_else(api: Api, upstream: FakeOpenAI) -> None:
    reader = await api.token("alpha", "dashboard", scopes=["usage:read"])
    refused(await api.call(reader, "POST", "/api/v1/workloads", workload()), "workloads:write")
    refused(await api.call(reader, "POST", "/v1/chat/completions", chat()), '"inference"')
    assert (await api.call(reader, "GET", "/api/v1/usage")).status_code == 200
    assert upstream.total_requests == 0
    member = await api.token("alpha", "ci")  # the default: every scope of its role
    assert (await api.call(member, "POST", "/api/v1/workloads", workload())).status_code == 201
    assert (await api.call(member, "POST", "/v1/chat/completions", chat())).status_code == 200


async def test_every_tenant_route_checks_its_scope(api: Api) -> None:
    """A tenant admin's key with exactly one scope passes the scope check on the routes
    of that scope and is refused, naming the scope, on every other route."""
    full = await api.token("alpha", "owner", roles=["tenant-admin"])
    wid = (await api.call(full, "POST", "/api/v1/workloads", workload())).json()["id"]
    victim = (await api.key("alpha", "victim"))["key_id"]
    routes = [
        ("inference", "POST", "/v1/chat/completions", chat()),
        ("inference", "POST", "/v1/completions", {"model": "fake-model", "prompt": "a b"}),
        ("inference", "POST", "/v1/embeddings", {"model": "fake-embed", "input": "a b"}),
        ("inference", "GET", "/v1/models", None),
        ("workloads:write", "POST", "/api/v1/workloads", workload("more")),
        ("workloads:write", "DELETE", f"/api/v1/workloads/{wid}", None),
        ("workloads:read", "GET", "/api/v1/workloads", None),
        ("workloads:read", "GET", f"/api/v1/workloads/{wid}", None),
        ("workloads:read", "GET", f"/api/v1/workloads/{wid}/logs", None),
        ("usage:read", "GET", "/api/v1/usage", None),
        ("keys:read", "GET", "/api/v1/admin/tenants/alpha/keys", None),
        ("keys:write", "POST", "/api/v1/admin/tenants/alpha/keys", {"principal": "new"}),
        ("keys:write", "DELETE", f"/api/v1/admin/tenants/alpha/keys/{victim}", None),
    ]
    for scope in TENANT_SCOPES + KEY_SCOPES:
        narrow = await api.token(
            "alpha", f"only-{scope.replace(':', '-')}", roles=["tenant-admin"], scopes=[scope]
        )
        for needed, method, path, body in routes:
            response = await api.call(narrow, method, path, body)
            if needed == scope:
                assert response.status_code not in (401, 403), (scope, path, response.text)
            else:
                refused(response, f'it needs scope "{needed}"')


async def test_every_admin_route_checks_its_scope(api: Api, upstream: FakeOpenAI) -> None:
    routes = [
        ("GET", "/api/v1/admin/config", None),
        ("POST", "/api/v1/admin/config", config(upstream.base_url)),
        ("DELETE", "/api/v1/admin/models/no-such-model", None),
        ("GET", "/api/v1/admin/tenants", None),
        ("DELETE", "/api/v1/admin/tenants/nobody", None),
        ("GET", "/api/v1/admin/models", None),
        ("GET", "/api/v1/admin/keys", None),
        ("POST", "/api/v1/admin/keys", {"principal": "deputy", "scopes": ["admin"]}),
        ("DELETE", "/api/v1/admin/keys/0123456789ab", None),
    ]
    for scope in [*TENANT_SCOPES, *KEY_SCOPES, "admin"]:
        narrow = await api.token(None, f"root-{scope.replace(':', '-')}", scopes=[scope])
        for method, path, body in routes:
            response = await api.call(narrow, method, path, body)
            if scope == "admin":
                assert response.status_code not in (401, 403), (path, response.text)
            else:
                refused(response, 'it needs scope "admin"')
        keys = await api.call(narrow, "GET", "/api/v1/admin/tenants/beta/keys")
        assert (keys.status_code == 200) == (scope == "keys:read"), keys.text


async def test_members_manage_no_keys(api: Api) -> None:
    member = await api.token("alpha", "bot")
    other = (await api.key("alpha", "other"))["key_id"]
    refused(await api.call(member, "POST", "/api/v1/admin/tenants/alpha/keys", {"principal": "x"}))
    refused(await api.call(member, "GET", "/api/v1/admin/tenants/alpha/keys"))
    refused(await api.call(member, "DELETE", f"/api/v1/admin/tenants/alpha/keys/{other}"))


async def test_a_tenant_admin_issues_and_revokes_member_keys_of_its_tenant_only(api: Api) -> None:
    boss = await api.key("alpha", "boss", roles=["tenant-admin"])
    peer = await api.key("alpha", "peer", roles=["tenant-admin"])
    beta_key = await api.key("beta", "b-bot")
    made = await api.key("alpha", "intern", by=boss["token"])
    assert (made["roles"], made["scopes"], made["tenant"]) == (
        ["member"],
        sorted(TENANT_SCOPES),
        "alpha",
    )
    create = "/api/v1/admin/tenants/alpha/keys"
    for roles in (["tenant-admin"], ["admin"], ["member", "tenant-admin"], ["owner"]):
        refused(
            await api.call(boss["token"], "POST", create, {"principal": "x", "roles": roles}),
            "only a platform admin may create or revoke such a key",
        )
    for victim in (peer, boss):  # a peer's key, and its own
        refused(
            await api.call(boss["token"], "DELETE", f"{create}/{victim['key_id']}"),
            'role "tenant-admin" is not below',
        )
    assert (await api.call(peer["token"], "GET", create)).status_code == 200  # untouched
    revoked = await api.call(boss["token"], "DELETE", f"{create}/{made['key_id']}")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    refused(await api.call(made["token"], "GET", "/api/v1/workloads"), status=401)
    # Tenant B is out of reach: its keys, through its path or alpha's.
    beta = "/api/v1/admin/tenants/beta/keys"
    refused(await api.call(boss["token"], "POST", beta, {"principal": "x"}), 'tenant "beta"')
    refused(await api.call(boss["token"], "GET", beta), 'tenant "beta"')
    refused(
        await api.call(boss["token"], "DELETE", f"{beta}/{beta_key['key_id']}"), 'tenant "beta"'
    )
    refused(await api.call(boss["token"], "DELETE", f"{create}/{beta_key['key_id']}"), status=404)
    assert (await api.call(beta_key["token"], "GET", "/api/v1/workloads")).status_code == 200


async def test_a_key_grants_no_scope_its_issuer_lacks(api: Api) -> None:
    keeper = await api.token("alpha", "keeper", roles=["tenant-admin"], scopes=["keys:write"])
    path = "/api/v1/admin/tenants/alpha/keys"
    body = {"principal": "x", "scopes": ["inference"]}
    refused(await api.call(keeper, "POST", path, body), 'lacks scope "inference"')
    refused(
        await api.call(keeper, "POST", path, {"principal": "x"}),
        "the issuer holds none of the scopes",
        status=400,
    )


async def test_a_tenants_key_never_carries_the_platform_role(api: Api) -> None:
    """The old hole: roles ["admin"] on a tenant's key quietly granted platform-wide
    access. Now a platform admin must ask for a platform key explicitly."""
    path = "/api/v1/admin/tenants/alpha/keys"
    for roles in (["admin"], ["member", "admin"]):
        refused(
            await api.call(ADMIN_KEY, "POST", path, {"principal": "ops", "roles": roles}),
            "POST /api/v1/admin/keys",
            "ignara keys create --admin",
            status=400,
        )
    assert (await api.call(ADMIN_KEY, "GET", path)).json() == []  # nothing was made


async def test_platform_keys_are_made_by_platform_admins_only(api: Api) -> None:
    boss = await api.token("alpha", "boss", roles=["tenant-admin"])
    refused(await api.call(boss, "POST", "/api/v1/admin/keys", {"principal": "me"}), "admin role")
    refused(await api.call(boss, "GET", "/api/v1/admin/keys"))
    ops = await api.key(None, "ops")
    assert (ops["tenant"], ops["roles"], "admin" in ops["scopes"]) == (None, ["admin"], True)
    assert (await api.call(ops["token"], "GET", "/api/v1/admin/tenants")).status_code == 200
    # A platform key may make another platform key: the powers do not come from a tenant.
    deputy = await api.key(None, "deputy", by=ops["token"])
    refused(
        await api.call(ops["token"], "POST", "/api/v1/workloads", workload()),
        "workloads belong to a tenant",
    )
    listed = await api.call(ops["token"], "GET", "/api/v1/admin/keys")
    assert [k["principal"] for k in listed.json()] == ["ops", "deputy"]
    gone = await api.call(ops["token"], "DELETE", f"/api/v1/admin/keys/{deputy['key_id']}")
    assert gone.status_code == 200
    refused(await api.call(deputy["token"], "GET", "/api/v1/admin/tenants"), status=401)
    refused(await api.call(ops["token"], "DELETE", "/api/v1/admin/keys/" + "f" * 12), status=404)


async def test_reusing_a_name_changes_no_other_key(api: Api) -> None:
    """The old hole: issuing a key for an existing principal name rewrote the roles of
    every key of that name, promoting or demoting them."""
    ops = await api.token(None, "ops")
    boss = await api.token("alpha", "boss", roles=["tenant-admin"])
    keys = "/api/v1/admin/tenants/alpha/keys"
    # A tenant admin reusing the platform admin's name demotes nobody.
    await api.key("alpha", "ops", by=boss)
    assert (await api.call(ops, "GET", "/api/v1/admin/tenants")).status_code == 200
    # Nor a tenant admin's name.
    await api.key("alpha", "boss", by=boss)
    assert (await api.call(boss, "GET", keys)).status_code == 200
    # A new, higher key for a member's name promotes the member's old key to nothing.
    member = await api.token("alpha", "bot")
    await api.key("alpha", "bot", roles=["tenant-admin"])
    refused(await api.call(member, "GET", keys), "roles [member]")
    listed = {
        (k["principal"], tuple(k["roles"])) for k in (await api.call(ADMIN_KEY, "GET", keys)).json()
    }
    assert ("bot", ("member",)) in listed and ("bot", ("tenant-admin",)) in listed


async def test_a_tenant_never_reaches_another(api: Api) -> None:
    alpha = await api.token("alpha", "a-bot", roles=["tenant-admin"])
    beta = await api.token("beta", "b-bot")
    wid = (await api.call(beta, "POST", "/api/v1/workloads", workload(queue="team-b"))).json()["id"]
    refused(await api.call(alpha, "GET", f"/api/v1/workloads/{wid}"), status=404)
    refused(await api.call(alpha, "DELETE", f"/api/v1/workloads/{wid}"), status=404)
    refused(await api.call(alpha, "GET", "/api/v1/usage?tenant=beta"))
    refused(await api.call(alpha, "POST", "/api/v1/workloads", workload(queue="team-b")))
    refused(
        await api.call(
            alpha, "POST", "/v1/chat/completions", chat(), **{"X-Ignara-Queue": "team-b"}
        )
    )


async def test_a_tenants_key_row_claiming_the_platform_role_grants_nothing(api: Api) -> None:
    """Even a row no service would write (an old database, a hand-edited table): a
    tenant's key holding roles ["admin"] and scope "admin" reaches no admin route and no
    other tenant; only the platform admin's explicit platform key does."""
    from gateway.auth import generate_api_key, hash_secret
    from tenants.models import ApiKey
    from tenants.services.api_keys import principal_for

    made = generate_api_key("live")
    async with api.services.database.session() as session:
        owner = await principal_for(session, "alpha", "sneaky")
        session.add(
            ApiKey(
                key_id=made.key_id,
                tenant="alpha",
                principal_id=owner.id,
                secret_hash=hash_secret(made.secret, api.services.pepper),
                roles=["admin"],
                scopes=["admin", "keys:read", "keys:write", "usage:read"],
            )
        )
    for method, path in (
        ("GET", "/api/v1/admin/tenants"),
        ("GET", "/api/v1/admin/config"),
        ("GET", "/api/v1/admin/keys"),
        ("GET", "/api/v1/admin/tenants/beta/keys"),
        ("GET", "/api/v1/admin/tenants/alpha/keys"),
    ):
        refused(await api.call(made.token, method, path), status=403)
    refused(
        await api.call(made.token, "POST", "/api/v1/admin/keys", {"principal": "me"}), status=403
    )
