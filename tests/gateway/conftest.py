"""Fixtures of the access tests (tests/gateway/access_harness.py): a fake upstream and a
live gateway configured with two tenants."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.settings import Settings
from tests.gateway.access_harness import Api, running
from tests.support.fake_openai import FakeOpenAI


@pytest.fixture
async def upstream() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(models=("fake-model", "fake-embed")) as fake:
        yield fake


@pytest.fixture
async def api(settings: Settings, upstream: FakeOpenAI) -> AsyncIterator[Api]:
    async with running(settings, upstream) as api:
        yield api
