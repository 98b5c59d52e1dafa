"""The console in a real browser (Debian's Chromium, driven by Playwright): an admin
signs in, issues a tenant admin's key (its token shown once), reads the chargeback
report; the tenant admin signs in with it, finds a waiting gang, reads why it waits,
cancels it, sees only its own tenant; a change without the CSRF token is refused; no
page breaks its Content-Security-Policy or asks anything of the internet."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
from playwright.async_api import Browser, BrowserContext, Page, expect

from gateway.console import CSP
from gateway.settings import Settings
from tests.conftest import ADMIN_KEY
from tests.usage.test_charges_api import CONFIG, store

NOVEMBER = "2026-11"  # the month tests/usage/test_charges_api.py's charges fall in


def waiting_gang() -> dict[str, Any]:
    """More GPUs than the whole cohort holds: it waits, and says why."""
    return {
        "name": "too-big",
        "queue": "team-a",
        "pod_sets": [{"name": "workers", "count": 64, "requests": {"nvidia.com/gpu": 1}}],
        "max_runtime_seconds": 60,
        "job": {"command": ["/usr/bin/python3", "-c", "print('never')"]},
    }


async def seed(base_url: str, settings: Settings) -> str:
    """The charges test's config and ledger rows, and a waiting gang of alpha's;
    returns the gang's id."""
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        applied = await client.post("/api/v1/admin/config", json=CONFIG, headers=admin)
        assert applied.status_code == 201, applied.text
        member = await client.post(
            "/api/v1/admin/tenants/alpha/keys", json={"principal": "alpha-bot"}, headers=admin
        )
        token = member.json()["token"]
        gang = await client.post(
            "/api/v1/workloads", json=waiting_gang(), headers={"Authorization": f"Bearer {token}"}
        )
        assert gang.status_code == 201, gang.text
    await asyncio.to_thread(store, settings)  # GPU-hour charges and token usage in November
    return str(gang.json()["id"])


class Watched:
    """A browser context that records CSP violations and any request off this host."""

    def __init__(self, context: BrowserContext, base_url: str) -> None:
        self.context = context
        self.host = urlparse(base_url).netloc
        self.violations: list[str] = []
        self.outside: list[str] = []

    async def page(self) -> Page:
        page = await self.context.new_page()
        page.on("console", self._console)
        page.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
        await page.route("**/*", self._route)
        return page

    def _console(self, message: Any) -> None:
        if "Content Security Policy" in message.text or "Content-Security-Policy" in message.text:
            self.violations.append(message.text)

    async def _route(self, route: Any) -> None:
        if urlparse(route.request.url).netloc != self.host:
            self.outside.append(route.request.url)
            await route.abort()
        else:
            await route.continue_()


async def watched(browser: Browser, base_url: str) -> Watched:
    context = await browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 800})
    return Watched(context, base_url)


async def sign_in(page: Page, key: str) -> None:
    await page.goto("/console")
    await expect(page.locator("h1")).to_have_text("Sign in")
    await page.fill("#key", key)
    await page.click("button[type=submit]")


async def sign_out(page: Page) -> None:
    await page.click("text=Sign out")
    await expect(page.locator("h1")).to_have_text("Sign in")


async def shot(page: Page, artifacts: Path, name: str) -> None:
    await page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)


async def test_an_admin_and_a_tenant_admin_run_the_console(
    browser: Browser, base_url: str, settings: Settings, artifacts: Path
) -> None:
    gang_id = await seed(base_url, settings)
    admin = await watched(browser, base_url)
    page = await admin.page()

    response = await page.goto("/console/login")
    assert response is not None and response.headers["content-security-policy"] == CSP
    await shot(page, artifacts, "login")
    await sign_in(page, ADMIN_KEY)
    await expect(page.locator("h1")).to_have_text("Dashboard")
    await expect(page.get_by_test_id("who")).to_contain_text("platform admin")
    await expect(page.get_by_test_id("quotas")).to_contain_text("team-a2")
    await shot(page, artifacts, "dashboard")

    await page.click("nav >> text=Tenants")
    await expect(page.get_by_test_id("tenants")).to_contain_text("beta")
    await shot(page, artifacts, "tenants")
    await page.click("[data-testid=tenants] >> text=alpha")
    await page.fill("#principal", "alpha-lead")
    await page.select_option("#role", "tenant-admin")
    await page.click("text=Create key")
    token = (await page.get_by_test_id("new-token").inner_text()).strip()
    assert token.startswith("ign_")
    await expect(page.get_by_test_id("keys")).to_contain_text("alpha-lead")
    await shot(page, artifacts, "tenant-keys")
    await page.reload()
    await expect(page.get_by_test_id("new-token")).to_have_count(0)  # shown once

    for name in ("Cohorts", "Audit"):  # served or not yet, each page answers without error
        await page.click(f"nav >> text={name}")
        await expect(page.get_by_test_id("api-error")).to_have_count(0)
        await shot(page, artifacts, name.lower())

    await page.click("nav >> text=Usage")
    await page.fill("#month", NOVEMBER)
    await page.select_option("#group_by", "tenant")
    await page.click("text=Show")
    usage = page.get_by_test_id("usage")
    await expect(usage).to_contain_text("alpha")
    await expect(usage).to_contain_text("7777")  # beta's GPU-hours, for the platform admin
    await expect(page.locator("figure.chart svg rect").first).to_be_visible()
    await shot(page, artifacts, "usage")
    await sign_out(page)

    lead = await watched(browser, base_url)
    page = await lead.page()
    await sign_in(page, token)
    await expect(page.get_by_test_id("who")).to_contain_text("tenant admin of alpha")
    await expect(page.get_by_test_id("count-pending")).to_have_text("1")
    await page.click("nav >> text=Workloads")
    await expect(page.get_by_test_id("workloads")).to_contain_text("too-big")
    await shot(page, artifacts, "workloads")
    await page.click("[data-testid=workloads] >> text=too-big")
    assert page.url.endswith(f"/console/workloads/{gang_id}")
    await expect(page.get_by_test_id("state")).to_have_text("pending")
    await expect(page.get_by_test_id("reason")).not_to_be_empty()
    await expect(page.get_by_test_id("events")).to_contain_text("submitted")
    await shot(page, artifacts, "workload")
    await page.click("text=Cancel workload")
    await expect(page.get_by_test_id("state")).to_have_text("cancelled")

    await page.goto(f"/console/usage?month={NOVEMBER}&group_by=queue")
    usage = page.get_by_test_id("usage")
    await expect(usage).to_contain_text("team-a2")
    await expect(usage).not_to_contain_text("team-b")  # beta's queue
    await expect(usage).not_to_contain_text("7777")
    await page.goto("/console/tenants/beta")
    await expect(page.get_by_test_id("api-error")).to_be_visible()
    await expect(page.get_by_test_id("keys")).to_have_count(0)
    await sign_out(page)

    for context in (admin, lead):
        assert context.violations == [], context.violations
        assert context.outside == [], context.outside
        await context.context.close()


async def test_a_change_without_the_csrf_token_is_refused(
    browser: Browser, base_url: str, settings: Settings
) -> None:
    await seed(base_url, settings)
    admin = await watched(browser, base_url)
    page = await admin.page()
    await sign_in(page, ADMIN_KEY)
    await page.goto("/console/tenants/alpha")
    # The same form, its token taken out: the browser sends the cookie, not the token.
    await page.fill("#principal", "forged")
    await page.evaluate(
        "document.querySelectorAll('input[name=csrf]').forEach((input) => input.remove())"
    )
    async with page.expect_response("**/console/tenants/alpha/keys") as answer:
        await page.click("text=Create key")
    assert (await answer.value).status == 403
    await expect(page.get_by_test_id("csrf-refused")).to_be_visible()
    status = await page.evaluate("fetch('/console/logout', {method: 'POST'}).then((r) => r.status)")
    assert status == 403
    await page.goto("/console/tenants/alpha")
    await expect(page.get_by_test_id("keys")).not_to_contain_text("forged")
    await expect(page.get_by_test_id("who")).to_be_visible()  # still signed in
    await admin.context.close()


async def test_the_openapi_page_works_offline(
    browser: Browser, base_url: str, artifacts: Path
) -> None:
    context = await watched(browser, base_url)
    page = await context.page()
    await page.goto("/schema")
    await expect(page.locator(".swagger-ui .info .title")).to_contain_text("Ignara Gateway")
    await expect(page.locator(".opblock").first).to_be_visible()
    await shot(page, artifacts, "schema")
    assert context.outside == [], context.outside
    await context.context.close()
