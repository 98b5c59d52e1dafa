"""OIDC sign-in in a real browser (Debian's Chromium, driven by Playwright), through the
test provider of tests/support/oidc_provider.py: the login page's "Sign in with"
button, the provider's redirect back, and the dashboard of the tenant admin it names,
with no Content-Security-Policy violation on the way."""

from __future__ import annotations

from pathlib import Path

import httpx
from playwright.async_api import Browser, expect

from gateway.app import create_app
from gateway.settings import Settings
from tests.conftest import ADMIN_KEY
from tests.console.test_console_oidc import CLIENT, LEAD, oidc_settings
from tests.gateway.test_workload_api import CONFIG, bearer
from tests.support.oidc_provider import oidc_provider
from tests.support.serve import serving


async def test_a_tenant_admin_signs_in_through_the_oidc_provider(
    browser: Browser, settings: Settings, artifacts: Path
) -> None:
    async with oidc_provider({CLIENT: None}) as idp:
        idp.user = dict(LEAD)
        async with serving(create_app(oidc_settings(settings, idp))) as url:
            async with httpx.AsyncClient(base_url=url) as admin:
                applied = await admin.post(
                    "/api/v1/admin/config", json=CONFIG, headers=bearer(ADMIN_KEY)
                )
                assert applied.status_code == 201, applied.text
            context = await browser.new_context(
                base_url=url, viewport={"width": 1280, "height": 800}
            )
            violations: list[str] = []
            page = await context.new_page()
            page.on(
                "console",
                lambda m: violations.append(m.text) if "Content Security" in m.text else None,
            )
            await page.goto("/console/login")
            button = page.get_by_test_id("oidc-login")
            await expect(button).to_have_text("Sign in with TestIdP")
            await page.screenshot(path=str(artifacts / "login-oidc.png"), full_page=True)
            await button.click()
            await page.wait_for_url(f"{url}/console/dashboard")
            await expect(page.locator("body")).to_contain_text("tenant admin of alpha")
            await expect(page.locator("body")).to_contain_text("ada")
            await page.screenshot(path=str(artifacts / "dashboard-oidc.png"), full_page=True)
            assert idp.token_requests and "code_verifier" in idp.token_requests[-1]
            # Signing out ends the session.
            await page.get_by_role("button", name="Sign out").click()
            await page.wait_for_url(f"{url}/console/login")
            await page.goto("/console/dashboard")
            await page.wait_for_url(f"{url}/console/login")
            assert violations == []
            await context.close()
