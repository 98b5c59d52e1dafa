"""Fixtures of the console's browser tests: a gateway served over real HTTP, and
Debian's Chromium (``/usr/bin/chromium``, installed by ``make test``) driven by
Playwright. Screenshots go to ``.artifacts/console/`` (or ``IGNARA_TEST_ARTIFACTS``)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.app import create_app
from gateway.settings import Settings
from tests.support.serve import serving

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = (
    Path(os.environ.get("IGNARA_TEST_ARTIFACTS", Path(__file__).parents[2] / ".artifacts"))
    / "console"
)


@pytest.fixture
async def base_url(settings: Settings) -> AsyncIterator[str]:
    async with serving(create_app(settings)) as url:
        yield url


@pytest.fixture
async def browser() -> AsyncIterator[object]:
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: `make chromium` installs Debian's chromium"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        # --no-sandbox: the tests run as root, where Chromium's sandbox will not start.
        chromium = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox"]
        )
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
