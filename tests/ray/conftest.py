"""A real Ray head (Jobs REST API, eight fake GPUs) for the whole session, from its own
virtual environment (made when missing). When it cannot be had the Ray tests are skipped,
saying why; in CI (``CI`` set) they fail instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ray import RayHead, install_ray, ray_head, unavailable_reason


@pytest.fixture(scope="session")
def ray() -> Iterator[RayHead]:
    if (reason := unavailable_reason()) is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the Ray tests against a real Ray head, and cannot: {reason}")
        pytest.skip(reason)
    try:
        install_ray()
    except (OSError, subprocess.CalledProcessError) as err:
        if os.environ.get("CI"):
            pytest.fail(f"cannot install Ray for its tests: {err}")
        pytest.skip(f"cannot install Ray for its tests: {err}")
    # Short: Ray's unix socket paths under it must fit in 107 bytes.
    directory = Path(tempfile.mkdtemp(prefix="ignara-ray-"))
    try:
        with ray_head(directory) as head:
            yield head
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def ray_jobs(ray: RayHead) -> Iterator[RayHead]:
    """The head, with every job stopped after the test (the head has 8 GPUs and 2 CPUs:
    a job left running would keep the next test's gang waiting)."""
    yield ray
    ray.stop_all_jobs()
