"""The ``kubernetes`` section of POST /api/v1/workloads: checked by Kubernetes' own rules
before anything is stored (a 422 naming the field), and every section the API accepts
makes manifests valid against the official batch/v1 schema (strict), with the flavor's
placement and the gateway's labels kept. No API server needed: nothing is sent to the
backend before admission."""

from __future__ import annotations

import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.backends import JobSpec, PodShape
from gateway.backends.kubernetes.mapping import LABEL_JOB, manifest
from gateway.backends.kubernetes.options import KubernetesOptions
from gateway.backends.sections import SectionError, check_sections
from gateway.settings import Settings
from tests.kubernetes.conftest import SETTINGS
from tests.kubernetes.schemas import validate_job, validate_job_template
from tests.slurm.test_slurm_gateway import Api
from tests.support.gangs import gang
from tests.support.sections import gateway_for

SECTION = {
    "node_selector": {"topology.kubernetes.io/zone": "eu-1a", "gpu": "a100"},
    "tolerations": [
        {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
        {"operator": "Exists", "effect": "NoExecute", "toleration_seconds": 30},
    ],
    "labels": {"team.example.com/sweep": "7", "run": "a-1"},
    "annotations": {"example.com/notes": "lr 0.1, warm-up 500 steps"},
    "working_dir": "/workspace/train",
}


@pytest.fixture
def api(settings: Settings, tmp_path: Path) -> Iterator[Api]:
    k8s = {
        "name": "k8s-prod",
        "kind": "kubernetes",
        "kubeconfig": str(tmp_path / "no-such-kubeconfig"),  # never read before admission
        "namespace": "training",
        "image": "registry.example/train:1",
    }
    with gateway_for(settings, k8s) as api:
        yield api


def with_section(section: Any) -> dict[str, Any]:
    return {**gang("sectioned", "true"), "kubernetes": section}


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"service_account": "gateway"}, "kubernetes.service_account"),  # never offered
        ({"node_selector": {"bad key!": "x"}}, "kubernetes.node_selector"),
        ({"node_selector": {"gpu": "not a value"}}, "kubernetes.node_selector[...]"),
        ({"labels": {"ignara.io/tenant": "beta"}}, "kubernetes.labels.ignara.io/tenant"),
        ({"labels": {"app.kubernetes.io/name": "x"}}, "kubernetes.labels.app.kubernetes.io/name"),
        ({"annotations": {"k8s.io/x": "y"}}, "kubernetes.annotations.k8s.io/x"),
        ({"labels": {"a" * 64: "x"}}, "kubernetes.labels"),  # a name of 64 characters
        ({"labels": {f"{'a' * 64}.example/x": "x"}}, f"kubernetes.labels.{'a' * 64}.example/x"),
        ({"tolerations": [{"operator": "Maybe"}]}, "kubernetes.tolerations[0].operator"),
        ({"tolerations": [{"effect": "NoSchedule"}]}, "kubernetes.tolerations[0].operator"),
        (
            {"tolerations": [{"key": "a", "operator": "Exists", "value": "b"}]},
            "kubernetes.tolerations[0].value",
        ),
        (
            {"tolerations": [{"key": "a", "effect": "NoSchedule", "toleration_seconds": 5}]},
            "kubernetes.tolerations[0].toleration_seconds",
        ),
        ({"working_dir": "relative/dir"}, "kubernetes.working_dir"),
    ],
)
def test_a_bad_kubernetes_section_is_a_422_naming_the_field_and_stores_nothing(
    api: Api, section: Any, field: str
) -> None:
    response = api.client.post("/api/v1/workloads", json=with_section(section), headers=api.headers)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["message"].startswith(f"{field}: "), error
    assert api.client.get("/api/v1/workloads", headers=api.headers).json()["items"] == []


def test_a_good_kubernetes_section_is_stored(api: Api) -> None:
    workload = api.submit(with_section(SECTION))
    assert api.get(workload)["state"] in ("pending", "admitted", "running")


def job(options: dict[str, Any], pods: tuple[PodShape, ...]) -> JobSpec:
    return JobSpec(
        "0123456789abcdef0123456789abcdef-1",
        ("python", "train.py"),
        {},
        3600,
        pods=pods,
        tenant="acme",
        queue="team-a",
        options={"kubernetes": options},
    )


def test_the_section_reaches_the_pods_and_the_flavor_and_gateway_keep_theirs() -> None:
    section = {**SECTION, "node_selector": {**SECTION["node_selector"], "gpu": "a100"}}
    section["labels"] = {**SECTION["labels"]}
    body = manifest(job(section, (PodShape(2, gpus=1, name="w", flavor="h100"),)), SETTINGS)
    validate_job(body)
    template = body["spec"]["template"]
    pod = template["spec"]
    # The flavor's node label (gpu: h100) wins over the section's gpu: a100.
    assert pod["nodeSelector"] == {"topology.kubernetes.io/zone": "eu-1a", "gpu": "h100"}
    assert pod["tolerations"] == [
        {"key": "gpu", "operator": "Exists"},  # the flavor's
        {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
        {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
    ]
    assert template["metadata"]["labels"]["team.example.com/sweep"] == "7"
    assert template["metadata"]["labels"][LABEL_JOB] == body["metadata"]["name"]
    assert template["metadata"]["annotations"]["example.com/notes"].startswith("lr 0.1")
    assert pod["containers"][0]["workingDir"] == "/workspace/train"
    assert "serviceAccountName" not in pod and pod["automountServiceAccountToken"] is False


_name = st.from_regex(r"\A[A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?\Z")
_prefix = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?(\.[a-z0-9]{1,8}){0,2}\Z")
_key = st.one_of(_name, st.builds(lambda p, n: f"{p}/{n}", _prefix, _name))
_value = st.one_of(st.just(""), _name)
_toleration = st.fixed_dictionaries(
    {},
    optional={
        "key": _key,
        "operator": st.sampled_from(["Exists", "Equal"]),
        "value": _value,
        "effect": st.sampled_from(["", "NoSchedule", "PreferNoSchedule", "NoExecute"]),
        "toleration_seconds": st.integers(0, 10**9),
    },
)
_sections = st.fixed_dictionaries(
    {},
    optional={
        "node_selector": st.dictionaries(_key, _value, max_size=4),
        "tolerations": st.lists(_toleration, max_size=3),
        "labels": st.dictionaries(_key, _value, max_size=4),
        "annotations": st.dictionaries(_key, st.text(string.printable, max_size=40), max_size=3),
        "working_dir": st.from_regex(r"\A/[ -~]{0,30}\Z"),
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(section=_sections)
def test_every_section_the_api_accepts_makes_valid_manifests(section: dict[str, Any]) -> None:
    try:
        options = msgspec.convert(section, KubernetesOptions)
    except msgspec.ValidationError:
        return  # refused with a 422: nothing to emit
    if options.problem(3600) is not None:
        return  # likewise
    one = manifest(job(section, (PodShape(2, gpus=1, name="w", flavor="h100"),)), SETTINGS)
    validate_job(one)
    gang_of_two = manifest(
        job(section, (PodShape(1, name="launcher"), PodShape(2, gpus=1, name="w", flavor="h100"))),
        SETTINGS,
    )
    for replicated in gang_of_two["spec"]["replicatedJobs"]:
        validate_job_template(replicated["template"])


def test_a_section_for_no_kubernetes_backend_is_refused() -> None:
    with pytest.raises(SectionError, match=r"^kubernetes: "):
        check_sections({"kubernetes": {"labels": {"a": "b"}}}, [], 3600)
