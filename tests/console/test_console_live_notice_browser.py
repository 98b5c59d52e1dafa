"""The dashboard's live updates in a real browser when the gateway refuses its event
stream: the page says why above the live table (not silence), asks again when the API
said to, and, once a stream is free and an event comes, drops the notice and refreshes
the table."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser, expect

import gateway.admin.live
from gateway.app import create_app
from gateway.settings import Settings
from tests.conftest import ADMIN_KEY
from tests.console.test_console_browser import shot, sign_in, sign_out, watched
from tests.gateway.test_workload_api import CONFIG, bearer, workload
from tests.support.serve import serving

ADMIN = bearer(ADMIN_KEY)


async def test_a_refused_stream_is_explained_and_the_page_recovers(
    browser: Browser, settings: Settings, artifacts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The API's Retry-After for one stream too many, short for the test (30 s served).
    monkeypatch.setattr(gateway.admin.live, "RETRY_AFTER_SECONDS", 5)
    app = create_app(settings)
    async with serving(app) as base_url:
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as api:
            answer = await api.post("/api/v1/admin/config", json=CONFIG, headers=ADMIN)
            assert answer.status_code == 201, answer.text
            key = await api.post(
                "/api/v1/admin/tenants/alpha/keys", json={"principal": "alpha-bot"}, headers=ADMIN
            )
            token = key.json()["token"]
        # Other tabs hold every stream the platform's admins may open.
        slots = app.state["services"].stream_slots
        held = []
        while (slot := slots.take("*")) is not None:
            held.append(slot)
        admin = await watched(browser, base_url)
        page = await admin.page()
        await sign_in(page, ADMIN_KEY)
        await expect(page.locator("h1")).to_have_text("Dashboard")
        notice = page.get_by_test_id("live-notice")
        await expect(notice).to_contain_text("Live updates paused")
        await expect(notice).to_contain_text(f"already {len(held)} event streams open")
        await shot(page, artifacts, "dashboard-live-refused")

        # The other tabs close; the page asks again (after the API's 5 s) and gets a
        # stream; the next event (alpha submits a workload) clears the notice.
        for slot in held:
            slot.release()
        async with asyncio.timeout(15):
            while slots.open("*") != 1:
                await asyncio.sleep(0.1)
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as api:
            answer = await api.post("/api/v1/workloads", json=workload(), headers=bearer(token))
            assert answer.status_code == 201, answer.text
        await expect(notice).to_have_count(0, timeout=15_000)
        await expect(page.get_by_test_id("live")).to_contain_text("team-a")
        await sign_out(page)
        assert admin.violations == [], admin.violations
        assert admin.outside == [], admin.outside
        await admin.context.close()
