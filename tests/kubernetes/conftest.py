from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gateway.backends.kubernetes import KubernetesBackend, KubernetesJobSettings, load_config
from gateway.backends.kubernetes.mapping import Placement
from tests.support.kube_api import FakeKubeApi

SETTINGS = KubernetesJobSettings(
    namespace="training",
    image="registry.example/train:1",
    flavors={"h100": Placement({"gpu": "h100"}, ({"key": "gpu", "operator": "Exists"},))},
)


@pytest.fixture
async def api() -> AsyncIterator[FakeKubeApi]:
    fake = FakeKubeApi("training")
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
async def make_backend(
    api: FakeKubeApi, tmp_path: Path
) -> AsyncIterator[Callable[..., KubernetesBackend]]:
    made: list[KubernetesBackend] = []
    kubeconfig = api.kubeconfig(tmp_path)

    def make(**kwargs: object) -> KubernetesBackend:
        settings = kwargs.pop("settings", SETTINGS)
        assert isinstance(settings, KubernetesJobSettings)
        backend = KubernetesBackend(
            "k8s",
            settings,
            lambda: load_config(str(kubeconfig), None, False),
            **kwargs,  # type: ignore[arg-type]
        )
        made.append(backend)
        return backend

    yield make
    for backend in made:
        await backend.close()
