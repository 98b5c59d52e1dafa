"""In a real browser: a platform admin gives a new key its own token limits and changes
them in the key's row, opens another tenant's waiting gang from every tenant's workloads,
reads its events and cancels it; alpha's tenant admin cannot open beta's gang, and reads
its own tenant's audit log, none of beta's entries (that cancellation included). No page
breaks the CSP."""

from __future__ import annotations

from pathlib import Path

import httpx
from playwright.async_api import Browser, expect

from tests.admin.test_queue_preview import CONFIG, gang
from tests.conftest import ADMIN_KEY
from tests.console.test_console_browser import shot, sign_in, sign_out, watched

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


async def seed(base_url: str) -> tuple[str, str, str]:
    """The preview tests' config, a waiting gang of alpha's and one of beta's; returns
    the gangs' ids and a key of alpha's tenant admin."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        applied = await client.post("/api/v1/admin/config", json=CONFIG, headers=ADMIN)
        assert applied.status_code == 201, applied.text
        ids = []
        for tenant, queue in (("alpha", "team-a"), ("beta", "team-b")):
            member = await client.post(
                f"/api/v1/admin/tenants/{tenant}/keys",
                json={"principal": f"{tenant}-bot"},
                headers=ADMIN,
            )
            submitted = await client.post(
                "/api/v1/workloads",
                json=gang(f"{tenant}-gang", queue, 10),
                headers={"Authorization": f"Bearer {member.json()['token']}"},
            )
            assert submitted.status_code == 201, submitted.text
            ids.append(str(submitted.json()["id"]))
        lead = await client.post(
            "/api/v1/admin/tenants/alpha/keys",
            json={"principal": "alpha-lead", "roles": ["tenant-admin"]},
            headers=ADMIN,
        )
    return ids[0], ids[1], str(lead.json()["token"])


async def test_an_admin_limits_a_key_and_cancels_another_tenants_gang(
    browser: Browser, base_url: str, artifacts: Path
) -> None:
    alpha_gang, beta_gang, lead_token = await seed(base_url)
    admin = await watched(browser, base_url)
    page = await admin.page()
    await sign_in(page, ADMIN_KEY)
    await expect(page.locator("h1")).to_have_text("Dashboard")

    await page.goto("/console/tenants/alpha")
    await page.fill("#principal", "capped-bot")
    await page.fill("#new-tokens_per_minute", "20000")
    await page.click("text=Create key")
    await expect(page.get_by_test_id("new-token")).to_be_visible()
    key_id = (await page.locator("[data-testid=new-key] code").inner_text()).strip()
    row = page.locator("[data-testid=keys] tr", has_text=key_id)
    await expect(row.get_by_test_id("limits")).to_have_text("20,000 tokens / min")
    await row.get_by_test_id(f"tokens_per_minute-{key_id}").fill("")
    await row.get_by_test_id(f"tokens_per_day-{key_id}").fill("500000")
    await row.get_by_role("button", name="Set limits").click()
    await expect(page.get_by_test_id("saved")).to_contain_text("500,000 tokens / day")
    row = page.locator("[data-testid=keys] tr", has_text=key_id)
    await expect(row.get_by_test_id("limits")).to_have_text("500,000 tokens / day")
    await shot(page, artifacts, "key-limits")

    await page.click("nav >> text=Workloads")
    await page.fill("#tenant", "beta")
    await page.click("text=Filter")
    await expect(page.get_by_test_id("workloads")).not_to_contain_text("alpha-gang")
    await page.click("[data-testid=workloads] >> text=beta-gang")
    assert page.url.endswith(f"/console/workloads/{beta_gang}")
    await expect(page.get_by_test_id("tenant")).to_have_text("beta")
    await expect(page.get_by_test_id("state")).to_have_text("pending")
    await expect(page.get_by_test_id("events")).to_contain_text("submitted")
    await shot(page, artifacts, "workload-admin")
    await page.click("text=Cancel workload")
    await expect(page.get_by_test_id("state")).to_have_text("cancelled")
    await sign_out(page)

    lead = await watched(browser, base_url)
    page = await lead.page()
    await sign_in(page, lead_token)
    await expect(page.get_by_test_id("who")).to_contain_text("tenant admin of alpha")
    await page.goto(f"/console/workloads/{beta_gang}")
    await expect(page.get_by_test_id("api-error")).to_be_visible()  # beta's: not found
    await page.click("nav >> text=Audit")
    audit = page.get_by_test_id("audit")
    await expect(audit).to_contain_text(alpha_gang)
    await expect(audit).not_to_contain_text(beta_gang)
    await expect(audit).not_to_contain_text("beta")
    await shot(page, artifacts, "audit-tenant-admin")
    await sign_out(page)

    for context in (admin, lead):
        assert context.violations == [], context.violations
        assert context.outside == [], context.outside
        await context.context.close()
