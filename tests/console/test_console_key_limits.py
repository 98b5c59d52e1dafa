"""A key's own token limits in the console: set when the key is created, shown in its
row, changed or lifted later, each change carrying the CSRF token; a number that is no
limit is refused with which field and why, and nothing changes; a tenant admin changes
its tenant's member keys only."""

from __future__ import annotations

import re
from typing import Any

from litestar.testing import TestClient

from tests.admin.test_queue_preview import ADMIN, key
from tests.conftest import ADMIN_KEY
from tests.console.test_console_http import csrf_of, sign_in
from tests.console.test_console_pages import client

__all__ = ["client"]

TPM, TPD = "tokens-per-minute", "tokens-per-day"


def limits_of(client: TestClient[Any], tenant: str, key_id: str) -> dict[str, int]:
    answer = client.get(f"/api/v1/admin/tenants/{tenant}/keys/{key_id}", headers=ADMIN)
    assert answer.status_code == 200, answer.text
    return dict(answer.json()["limits"])


def rows_of(page: str) -> dict[str, str]:
    """Each key's row of the keys table, by key id."""
    return {
        key_id: row
        for row in re.findall(r"<tr>(.*?)</tr>", page, re.S)
        for key_id in re.findall(r"<td><code>([0-9a-f]+)</code>", row)
    }


def new_key_id(page: str) -> str:
    match = re.search(r"New key <code>([0-9a-f]+)</code>", page)
    assert match is not None, page
    return match.group(1)


def test_an_admin_creates_a_key_with_limits_and_changes_and_lifts_them(
    client: TestClient[Any],
) -> None:
    sign_in(client, ADMIN_KEY)
    page = client.get("/console/tenants/alpha")
    assert 'name="tokens_per_minute"' in page.text and 'name="tokens_per_day"' in page.text
    csrf = csrf_of(page.text)
    made = client.post(
        "/console/tenants/alpha/keys",
        data={"csrf": csrf, "principal": "capped", "role": "member", "tokens_per_minute": "20,000"},
    )
    assert made.status_code == 200 and 'data-testid="new-token"' in made.text
    key_id = new_key_id(made.text)
    assert limits_of(client, "alpha", key_id) == {TPM: 20000}
    assert "20,000 tokens / min" in rows_of(made.text)[key_id]
    # one with no limits says so
    plain = client.post(
        "/console/tenants/alpha/keys", data={"csrf": csrf, "principal": "free", "role": "member"}
    )
    plain_id = new_key_id(plain.text)
    assert limits_of(client, "alpha", plain_id) == {}
    assert 'data-testid="limits"><span class="muted">none' in rows_of(plain.text)[plain_id]

    path = f"/console/tenants/alpha/keys/{key_id}/limits"
    changed = client.post(
        path, data={"csrf": csrf, "tokens_per_minute": "", "tokens_per_day": "1000000"}
    )
    assert changed.status_code == 200 and 'data-testid="saved"' in changed.text
    assert limits_of(client, "alpha", key_id) == {TPD: 1000000}  # the empty one lifted
    row = rows_of(changed.text)[key_id]
    assert "1,000,000 tokens / day" in row and "/ min" not in row.split("<form")[0]
    assert f'data-testid="tokens_per_day-{key_id}"' in row and 'value="1000000"' in row

    lifted = client.post(path, data={"csrf": csrf, "tokens_per_minute": "", "tokens_per_day": ""})
    assert 'data-testid="saved"' in lifted.text
    assert limits_of(client, "alpha", key_id) == {}


def test_a_limit_that_is_no_limit_is_refused_with_why_and_nothing_changes(
    client: TestClient[Any],
) -> None:
    sign_in(client, ADMIN_KEY)
    csrf = csrf_of(client.get("/console/tenants/alpha").text)
    for value, why in [
        ("lots", "is not a whole number of tokens"),
        ("0", "from 1 to 1,000,000,000,000"),
        ("1000000000001", "from 1 to 1,000,000,000,000"),
        ("-5", "is not a whole number"),
        ("2.5", "is not a whole number"),
    ]:
        refused = client.post(
            "/console/tenants/alpha/keys",
            data={"csrf": csrf, "principal": "nope", "role": "member", "tokens_per_day": value},
        )
        assert refused.status_code == 200 and 'data-testid="form-error"' in refused.text
        assert "Key not created: tokens per day" in refused.text and why in refused.text, value
    keys = client.get("/api/v1/admin/tenants/alpha/keys", headers=ADMIN).json()
    assert "nope" not in [k["principal"] for k in keys]

    made = client.post(
        "/console/tenants/alpha/keys",
        data={"csrf": csrf, "principal": "capped", "role": "member", "tokens_per_minute": "500"},
    )
    key_id = new_key_id(made.text)
    path = f"/console/tenants/alpha/keys/{key_id}/limits"
    bad = client.post(path, data={"csrf": csrf, "tokens_per_minute": "x"})
    assert 'data-testid="form-error"' in bad.text and "tokens per minute" in bad.text
    nothing = client.post(path, data={"csrf": csrf})
    assert 'data-testid="form-error"' in nothing.text
    no_token = client.post(path, data={"tokens_per_minute": "9"}, follow_redirects=False)
    assert no_token.status_code == 403 and 'data-testid="csrf-refused"' in no_token.text
    assert limits_of(client, "alpha", key_id) == {TPM: 500}


def test_a_tenant_admin_changes_its_member_keys_limits_only(client: TestClient[Any]) -> None:
    member = key(client, "alpha").split("_")[2]
    peer = key(client, "alpha", "tenant-admin").split("_")[2]
    theirs = key(client, "beta").split("_")[2]
    sign_in(client, key(client, "alpha", "tenant-admin"))
    page = client.get("/console/tenants/alpha")
    rows = rows_of(page.text)
    assert f'data-testid="limits-form-{member}"' in rows[member]
    assert "limits-form" not in rows[peer]  # a peer's key is not its to change
    csrf = csrf_of(page.text)

    done = client.post(
        f"/console/tenants/alpha/keys/{member}/limits",
        data={"csrf": csrf, "tokens_per_minute": "100", "tokens_per_day": ""},
    )
    assert 'data-testid="saved"' in done.text
    assert limits_of(client, "alpha", member) == {TPM: 100}

    # by URL all the same: the API refuses, and says so
    for tenant, key_id in (("alpha", peer), ("beta", theirs)):
        refused = client.post(
            f"/console/tenants/{tenant}/keys/{key_id}/limits",
            data={"csrf": csrf, "tokens_per_minute": "1"},
        )
        assert refused.status_code == 403 and 'data-testid="api-error"' in refused.text
        assert limits_of(client, tenant, key_id) == {}
