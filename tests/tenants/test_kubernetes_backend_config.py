"""``kind: kubernetes`` backends in the config: exactly one of a kubeconfig file and
in-cluster credentials, a namespace and image, and per-flavor node labels and tolerations
that Kubernetes itself would accept; a bad field is refused naming it (422 through the
admin API); credentials are never part of the config."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import Settings
from quota.errors import ConfigError
from tenants import parse_config
from tenants.config_file import KubernetesBackendDoc, KubernetesFlavorDoc, TolerationDoc
from tests.conftest import ADMIN_KEY

K8S: dict[str, Any] = {
    "name": "k8s-prod",
    "kind": "kubernetes",
    "kubeconfig": "/etc/ignara/kubeconfig",
    "namespace": "training",
    "image": "registry.example/train:1",
    "flavors": {
        "h100": {
            "node_labels": {"nvidia.com/gpu.product": "H100-SXM"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        }
    },
}
QUEUE = {
    "name": "q",
    "resource_groups": [
        {
            "resources": ["nvidia.com/gpu"],
            "flavors": [{"name": "h100", "quotas": {"nvidia.com/gpu": {"nominal": 8}}}],
        }
    ],
}


def config(**fields: Any) -> dict[str, Any]:
    backend = {**copy.deepcopy(K8S), **fields}
    for name in [k for k, v in backend.items() if v is None]:
        del backend[name]
    return {
        "backends": [backend],
        "flavors": [{"name": "h100", "backend": "k8s-prod"}],
        "cluster_queues": [copy.deepcopy(QUEUE)],
    }


def flavor(**placement: Any) -> dict[str, Any]:
    return {"h100": placement}


def test_a_kubernetes_backend_parses_with_its_flavor_placement() -> None:
    parsed = parse_config(config())
    assert parsed.backends == [
        KubernetesBackendDoc(
            name="k8s-prod",
            namespace="training",
            image="registry.example/train:1",
            kubeconfig="/etc/ignara/kubeconfig",
            flavors={
                "h100": KubernetesFlavorDoc(
                    node_labels={"nvidia.com/gpu.product": "H100-SXM"},
                    tolerations=[
                        TolerationDoc(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
                    ],
                )
            },
        )
    ]
    assert parsed.flavor_backends == {"h100": "k8s-prod"}


def test_in_cluster_credentials_need_no_file() -> None:
    parsed = parse_config(config(kubeconfig=None, in_cluster=True, use_jobset=False))
    backend = parsed.backends[0]
    assert isinstance(backend, KubernetesBackendDoc)
    assert backend.in_cluster and backend.kubeconfig is None and not backend.use_jobset


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (config(kubeconfig=None), "backends[0].kubeconfig"),  # neither
        (config(in_cluster=True), "backends[0].kubeconfig"),  # both
        (config(kubeconfig="relative/kubeconfig"), "backends[0].kubeconfig"),
        (config(kubeconfig="/etc/../root/.kube/config"), "backends[0].kubeconfig"),
        (config(kubeconfig=None, in_cluster=True, context="prod"), "backends[0].context"),
        (config(namespace="Training"), "backends[0].namespace"),
        (config(namespace="a" * 64), "backends[0].namespace"),
        (config(namespace=None), "backends[0]"),
        (config(image=""), "backends[0].image"),
        (config(image="train:1 --privileged"), "backends[0].image"),
        (config(token="abc"), "backends[0]"),  # no credentials in the config
        (config(use_jobset="yes"), "backends[0].use_jobset"),
        (config(flavors={"a100": {}}), "backends[0].flavors.a100"),
        (config(flavors=flavor(node_labels={"bad key!": "x"})), "backends[0].flavors.h100"),
        (config(flavors=flavor(node_labels={"gpu": "-x"})), "backends[0].flavors.h100"),
        (config(flavors=flavor(node_labels={"gpu": "x" * 64})), "backends[0].flavors.h100"),
        (
            config(flavors=flavor(tolerations=[{"key": "gpu", "operator": "Maybe"}])),
            "backends[0].flavors",
        ),
        (
            config(
                flavors=flavor(tolerations=[{"key": "gpu", "operator": "Exists", "value": "x"}])
            ),
            "backends[0].flavors.h100.tolerations[0].value",
        ),
        (
            config(flavors=flavor(tolerations=[{"value": "x"}])),
            "backends[0].flavors.h100.tolerations[0].operator",
        ),
        (
            config(flavors=flavor(tolerations=[{"key": "g", "toleration_seconds": 5}])),
            "backends[0].flavors.h100.tolerations[0].toleration_seconds",
        ),
        (
            config(flavors=flavor(tolerations=[{"key": "g", "effect": "Sometimes"}])),
            "backends[0].flavors",
        ),
    ],
)
def test_a_bad_kubernetes_backend_is_refused_naming_the_field(
    data: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    assert str(caught.value).startswith(field), str(caught.value)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient[Any]]:
    with TestClient(app=create_app(settings)) as client:
        yield client


def test_through_the_admin_api_a_bad_field_is_a_422_and_nothing_is_stored(
    client: TestClient[Any],
) -> None:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    bad = config(in_cluster=True)
    response = client.post("/api/v1/admin/config", json=bad, headers=headers)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"].startswith("backends[0].kubeconfig")
    assert client.get("/api/v1/admin/config", headers=headers).json()["backends"] == []
    response = client.post("/api/v1/admin/config", json=config(), headers=headers)
    assert response.status_code == 201, response.text
    stored = client.get("/api/v1/admin/config", headers=headers).json()["backends"]
    assert stored[0]["kind"] == "kubernetes" and stored[0]["kubeconfig"] == K8S["kubeconfig"]
