"""Fixtures for the policy tests: the repository's policies, and engines of
every backend (the OPA server backend talks to a `FakeOpaServer`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.policy import EmbeddedOpa, OpaServer, PolicyEngine, load_policies
from tests.policy.fake_opa_server import FakeOpaServer

POLICY_DIR = Path(__file__).resolve().parents[2] / "policies" / "rego"
BACKENDS = ("embedded", "server")

TENANTS: dict[str, Any] = {
    "acme": {
        "queues": ["acme-main", "acme-batch"],
        "flavors": ["h100", "a100"],
        "backends": ["slurm", "local"],
        "limits": {
            "max_pods_per_workload": 16,
            "max_gpus_per_workload": 32,
            "max_runtime_seconds": 86400,
        },
    },
    "globex": {"queues": ["globex-main"], "flavors": ["a100"], "backends": ["ray"]},
    "initech": {"suspended": True, "queues": ["initech-main"], "backends": ["local"]},
}
DATA: dict[str, Any] = {"ignara": {"tenants": TENANTS}}

MakeEngine = Callable[..., PolicyEngine]


def new_engine(backend: str, opa_url: str | None, **options: Any) -> PolicyEngine:
    """An unloaded engine; decisions get 2 s unless a test says otherwise."""
    options.setdefault("timeout", 2.0)
    if backend == "embedded":
        return EmbeddedOpa(**options)
    assert opa_url is not None
    options.setdefault("startup_timeout", 5.0)
    options.setdefault("retries", 0)
    return OpaServer(opa_url, **options)


@pytest.fixture(scope="session")
def policies() -> dict[str, str]:
    return load_policies(POLICY_DIR)


@pytest.fixture
def fake_opa() -> Iterator[FakeOpaServer]:
    with FakeOpaServer() as server:
        yield server


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def make_engine(backend: str, request: pytest.FixtureRequest) -> AsyncIterator[MakeEngine]:
    """Build engines of the test's backend; all are closed afterwards."""
    made: list[PolicyEngine] = []

    def make(**options: Any) -> PolicyEngine:
        url = request.getfixturevalue("fake_opa").url if backend == "server" else None
        engine = new_engine(backend, url, **options)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        await engine.close()


@pytest.fixture
async def engine(make_engine: MakeEngine, policies: dict[str, str]) -> PolicyEngine:
    """The repository's policies and `DATA`, loaded on the test's backend."""
    loaded = make_engine()
    await loaded.load(policies, DATA)
    return loaded
