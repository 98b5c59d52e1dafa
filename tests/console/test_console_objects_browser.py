"""In a real browser: a platform admin builds quota from nothing but the console: a new
flavor, a cohort with its own quota of it, a queue in that cohort; sees the queue under
its cohort in the live tree, and opens the settings page. No page breaks the CSP or
reaches off the host."""

from __future__ import annotations

from pathlib import Path

import httpx
from playwright.async_api import Browser, expect

from tests.admin.test_queue_preview import CONFIG
from tests.conftest import ADMIN_KEY
from tests.console.test_console_browser import shot, sign_in, watched
from tests.console.test_console_queue_browser import until_text

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
GPU = "nvidia.com/gpu"


async def test_an_admin_creates_a_flavor_a_cohort_and_a_queue_in_it(
    browser: Browser, base_url: str, artifacts: Path
) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        applied = await client.post("/api/v1/admin/config", json=CONFIG, headers=ADMIN)
        assert applied.status_code == 201, applied.text
    admin = await watched(browser, base_url)
    page = await admin.page()
    await sign_in(page, ADMIN_KEY)
    await expect(page.locator("h1")).to_have_text("Dashboard")

    await page.click("nav >> text=Flavors")
    await page.fill("#flavor-name", "l40s")
    await page.click("text=Create flavor")
    await expect(page.get_by_test_id("saved")).to_contain_text("Flavor l40s created")
    await expect(page.get_by_test_id("flavors")).to_contain_text("l40s")
    await shot(page, artifacts, "flavors")

    await page.click("nav >> text=Cohorts")
    cohort_form = page.get_by_test_id("create-cohort")
    await page.fill("#cohort-name", "inference")
    await cohort_form.get_by_test_id("flavor-0").select_option("l40s")
    await cohort_form.get_by_test_id("resource-0").fill(GPU)
    await cohort_form.get_by_test_id("nominal-0").fill("4")
    await page.click("text=Create cohort")
    await expect(page.get_by_test_id("saved")).to_contain_text("Cohort inference created")
    await expect(page.locator("h1")).to_have_text("Cohort inference")
    await expect(page.get_by_test_id("nominal-0")).to_have_value("4")

    await page.click("nav >> text=Queues")
    queue_form = page.get_by_test_id("create-queue")
    await page.fill("#queue-name", "serving")
    await queue_form.locator("select#cohort").select_option("inference")
    await queue_form.locator("select#reclaim_within_cohort").select_option("Any")
    await queue_form.get_by_test_id("flavor-0").select_option("l40s")
    await queue_form.get_by_test_id("resource-0").fill(GPU)
    await queue_form.get_by_test_id("nominal-0").fill("2")
    await queue_form.get_by_test_id("lending_limit-0").fill("1")
    await page.click("text=Create queue")
    await expect(page.get_by_test_id("saved")).to_contain_text("Queue serving created")
    await expect(page.locator("h1")).to_have_text("Queue serving")
    await page.click("text=Cohort, queueing, preemption and flavors")
    settings = page.get_by_test_id("queue-settings")
    await expect(settings.locator("select#cohort")).to_have_value("inference")
    await expect(settings.get_by_test_id("lending_limit-0")).to_have_value("1")
    await shot(page, artifacts, "queue-new")

    # The live tree shows it with the admission loop's next pass.
    await until_text(page, "/console/cohorts", ">serving</a>")
    cohort = page.locator("[data-testid=tree-cohort]", has_text="inference")
    await expect(cohort.get_by_test_id("tree-queue")).to_contain_text("serving")
    await expect(page.get_by_test_id("cohorts")).to_contain_text("l40s nvidia.com/gpu: 4")
    await shot(page, artifacts, "cohorts-new-queue")

    await page.click("nav >> text=Settings")
    await expect(page.get_by_test_id("settings")).to_be_visible()
    await shot(page, artifacts, "settings")
    assert admin.violations == [], admin.violations
    assert admin.outside == [], admin.outside
