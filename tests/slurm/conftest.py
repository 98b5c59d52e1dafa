"""A real Slurm (slurmctld, slurmd, slurmrestd with eight fake GPUs) for the whole session,
from the Debian packages (installed when missing). Without root or apt the Slurm tests are
skipped, saying why; in CI (``CI`` set) a missing Slurm fails them instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.slurm import (
    SlurmCluster,
    install_packages,
    slurm_cluster,
    unavailable_reason,
)


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmCluster]:
    if (reason := unavailable_reason()) is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the Slurm tests against a real Slurm, and cannot: {reason}")
        pytest.skip(reason)
    install_packages()
    # Not pytest's tmp_path: its parents are private to root, and munged (as munge) and
    # slurmrestd (as slurm) must pass through this directory.
    directory = Path(tempfile.mkdtemp(prefix="ignara-slurm-"))
    try:
        with slurm_cluster(directory) as cluster:
            yield cluster
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def slurm_jobs(slurm: SlurmCluster) -> Iterator[SlurmCluster]:
    """The cluster, with every job cancelled after the test (the node has 2 CPUs: a job
    left running would keep the next test's gang waiting)."""
    yield slurm
    subprocess.run(["scancel", "--user=root"], env=slurm.env, check=False, capture_output=True)
