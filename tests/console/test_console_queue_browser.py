"""The queue editor in a real browser: an admin opens a queue from the cohort tree,
raises its quota, sees the engine's preview admit the waiting gang, saves, and sees the
gang admitted by the admission loop; and the new pages (queues, models, backends,
tenants, every tenant's workloads) render without breaking the CSP."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
from playwright.async_api import Browser, Page, expect

from tests.admin.test_queue_preview import CONFIG, gang
from tests.conftest import ADMIN_KEY
from tests.console.test_console_browser import shot, sign_in, sign_out, watched

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


async def seed(base_url: str) -> str:
    """The preview tests' cohort of two queues, and a gang of alpha's that waits (it
    asks 10 GPUs of a cohort of 8); returns its id."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        applied = await client.post("/api/v1/admin/config", json=CONFIG, headers=ADMIN)
        assert applied.status_code == 201, applied.text
        member = await client.post(
            "/api/v1/admin/tenants/alpha/keys", json={"principal": "alpha-bot"}, headers=ADMIN
        )
        token = member.json()["token"]
        submitted = await client.post(
            "/api/v1/workloads",
            json=gang("big-gang", "team-a", 10),
            headers={"Authorization": f"Bearer {token}"},
        )
        assert submitted.status_code == 201, submitted.text
    return str(submitted.json()["id"])


async def until_text(page: Page, path: str, *needles: str, seconds: float = 20) -> None:
    """Reload ``path`` until it says one of ``needles`` (the live board and the loop
    catch up within their next pass)."""
    deadline = time.monotonic() + seconds
    while True:
        await page.goto(path)
        content = await page.content()
        if any(needle in content for needle in needles):
            return
        assert time.monotonic() < deadline, f"{path} never said any of {needles}"
        await asyncio.sleep(0.3)


async def test_an_admin_edits_a_queues_quota_previews_saves_and_the_gang_is_admitted(
    browser: Browser, base_url: str, artifacts: Path
) -> None:
    gang_id = await seed(base_url)
    admin = await watched(browser, base_url)
    page = await admin.page()
    await sign_in(page, ADMIN_KEY)
    await expect(page.locator("h1")).to_have_text("Dashboard")

    await until_text(page, "/console/cohorts", "/console/queues/team-a")
    await page.click("[data-testid=cohort-tree] >> text=team-a")
    await expect(page.locator("h1")).to_have_text("Queue team-a")
    await expect(page.get_by_test_id("pending")).to_have_text("1")
    nominal = page.get_by_test_id("nominal-h100-nvidia.com/gpu")
    await expect(nominal).to_have_value("4")
    await shot(page, artifacts, "queue")

    await nominal.fill("10")
    await page.click("[data-testid=quota-editor] >> text=Preview")
    await expect(page.get_by_test_id("preview-admitted-count")).to_have_text("1")
    await expect(page.get_by_test_id("preview-admitted")).to_contain_text(gang_id)
    await expect(page.get_by_test_id("preview-admitted")).to_contain_text("alpha")
    await expect(page.get_by_test_id("preview-preempted-count")).to_have_text("0")
    await expect(nominal).to_have_value("10")  # what was typed stays for the save
    await shot(page, artifacts, "queue-preview")

    await page.click("[data-testid=quota-editor] >> text=Save")
    await expect(page.get_by_test_id("saved")).to_contain_text("Saved queue team-a")
    await expect(page.get_by_test_id("nominal-h100-nvidia.com/gpu")).to_have_value("10")
    # The admission loop admits the gang on its next pass; the workloads page shows it.
    # (it runs for a moment, then finishes: any of those states means it was admitted)
    await until_text(
        page,
        "/console/workloads?queue=team-a",
        *(f'class="state {s}"' for s in ("admitted", "running", "finished")),
        seconds=15,
    )
    await expect(page.get_by_test_id("workloads")).to_contain_text("big-gang")
    await shot(page, artifacts, "workloads-admin")

    for name, test_id in (
        ("Queues", "queues"),
        ("Models", "models"),
        ("Backends", "backends"),
        ("Tenants", "tenants"),
    ):
        await page.click(f"nav >> text={name}")
        await expect(page.get_by_test_id(test_id)).to_be_visible()
        await expect(page.get_by_test_id("api-error")).to_have_count(0)
        await shot(page, artifacts, name.lower())
    await sign_out(page)
    assert admin.violations == [], admin.violations
    assert admin.outside == [], admin.outside
    await admin.context.close()


async def test_the_dashboard_shows_a_gang_admitted_live_without_a_reload(
    browser: Browser, base_url: str, artifacts: Path
) -> None:
    """One tab watches the dashboard; another raises the queue's quota. The dashboard's
    live table, fed by the event stream, shows the gang leave the pending count with no
    navigation of its own."""
    await seed(base_url)
    admin = await watched(browser, base_url)
    watcher = await admin.page()
    await sign_in(watcher, ADMIN_KEY)
    await until_text(watcher, "/console/dashboard", "/console/queues/team-a")
    row = watcher.locator("[data-testid=live] tr").filter(
        has=watcher.locator("a[href='/console/queues/team-a']")
    )
    pending = row.locator("td").nth(3)
    await expect(pending).to_have_text("1")
    navigations: list[str] = []
    watcher.on(
        "framenavigated",
        lambda frame: navigations.append(frame.url) if frame == watcher.main_frame else None,
    )

    editor = await admin.page()  # the same session, in a second tab
    await editor.goto("/console/queues/team-a")
    await editor.get_by_test_id("nominal-h100-nvidia.com/gpu").fill("10")
    await editor.click("[data-testid=quota-editor] >> text=Save")
    await expect(editor.get_by_test_id("saved")).to_contain_text("Saved queue team-a")

    await expect(pending).to_have_text("0", timeout=20_000)
    await shot(watcher, artifacts, "dashboard-live")
    assert navigations == [], navigations
    assert admin.violations == [], admin.violations
    assert admin.outside == [], admin.outside
    await admin.context.close()
