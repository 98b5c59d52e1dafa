"""Every manifest the Kubernetes adapter emits is valid against the official schemas:
batch/v1 Job (Kubernetes 1.37, strict: no unknown field) and the JobSet v1alpha2 CRD's
openAPIV3Schema (kubeflow-trainer-api's JobSet models; and the CRD's schema where it is
on the machine); names and labels follow Kubernetes' own rules. No API server can run on
this machine (shared/notes/backends.md §3): this is what proves the manifests."""

from __future__ import annotations

import copy
import re
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from gateway.backends import JobSpec, PodShape
from gateway.backends.kubernetes.mapping import KubernetesJobSettings, Placement, manifest
from tests.kubernetes.schemas import (
    JobSetInvalidError,
    validate_job,
    validate_job_template,
    validate_jobset,
)

GIB = 2**30
SETTINGS = KubernetesJobSettings(
    namespace="training",
    image="registry.example/train:1",
    flavors={
        "h100": Placement(
            {"nvidia.com/gpu.product": "H100-SXM", "pool": "a"},
            (
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {
                    "key": "spot",
                    "operator": "Equal",
                    "value": "true",
                    "effect": "NoExecute",
                    "tolerationSeconds": 60,
                },
            ),
        ),
        "cpu": Placement({"pool": "cpu"}),
    },
)
DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

JOBS = {
    "one pod set of 2 x 1 GPU": JobSpec(
        "0123456789abcdef0123456789abcdef-1",
        ("python", "train.py"),
        {"SEED": "1"},
        3600,
        pods=(PodShape(2, gpus=1, cpu_millis=500, memory_bytes=8 * GIB, name="w", flavor="h100"),),
        tenant="acme",
        queue="team-a",
    ),
    "no pods named (one process), no requests": JobSpec("abc-7", ("true",), {}, 60),
    "a pod set asking for nothing": JobSpec("abc-2", ("true",), {}, 60, pods=(PodShape(1),)),
    "tenant and queue that are not label values": JobSpec(
        "abc-3",
        ("true",),
        {},
        60,
        pods=(PodShape(1, flavor="unknown-flavor"),),
        tenant="Acme Research, Inc." + "x" * 80,
        queue="-team.a-",
    ),
    "an id too long for pods' names": JobSpec("a" * 60 + "-12", ("true",), {}, 60),
}
GANGS = {
    "launcher and workers on two flavors": JobSpec(
        "0123456789abcdef0123456789abcdef-2",
        ("torchrun", "train.py"),
        {"NCCL_DEBUG": "INFO"},
        7200,
        pods=(
            PodShape(1, cpu_millis=2000, memory_bytes=4 * GIB, name="launcher", flavor="cpu"),
            PodShape(
                8, gpus=8, cpu_millis=32000, memory_bytes=512 * GIB, name="workers", flavor="h100"
            ),
        ),
        tenant="acme",
        queue="team-a",
    ),
    "pod set names that clash once shortened": JobSpec(
        "abc-4",
        ("true",),
        {},
        60,
        pods=(
            PodShape(1, name="parameter.server"),
            PodShape(2, name="parameter-server-b"),
            PodShape(1, name="x"),
        ),
    ),
}


def _names_and_labels(obj: dict[str, Any]) -> None:
    metadata = obj["metadata"]
    assert DNS_LABEL.match(metadata["name"]) and len(metadata["name"]) <= 40
    for labels in _all_labels(obj):
        for key, value in labels.items():
            assert LABEL_VALUE.match(value) and len(value) <= 63, (key, value)


def _all_labels(obj: Any) -> list[dict[str, str]]:
    found = []
    if isinstance(obj, dict):
        if isinstance(obj.get("labels"), dict):
            found.append(obj["labels"])
        for value in obj.values():
            found.extend(_all_labels(value))
    elif isinstance(obj, list):
        for value in obj:
            found.extend(_all_labels(value))
    return found


@pytest.mark.parametrize("job", JOBS.values(), ids=JOBS.keys())
def test_a_one_pod_set_gang_is_a_valid_indexed_job(job: JobSpec) -> None:
    body = manifest(job, SETTINGS)
    assert (body["apiVersion"], body["kind"]) == ("batch/v1", "Job")
    validate_job(body)
    _names_and_labels(body)


@pytest.mark.parametrize("job", GANGS.values(), ids=GANGS.keys())
def test_a_gang_of_pod_sets_is_a_valid_jobset(job: JobSpec) -> None:
    body = manifest(job, SETTINGS)
    assert (body["apiVersion"], body["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    names = [r["name"] for r in body["spec"]["replicatedJobs"]]
    assert len(set(names)) == len(names) == len(job.pods)
    for replicated in body["spec"]["replicatedJobs"]:
        assert DNS_LABEL.match(replicated["name"])
        validate_job_template(replicated["template"])
    _names_and_labels(body)
    validate_jobset(body)


def test_the_job_schema_refuses_what_the_api_server_would() -> None:
    """The checks can fail: a misspelled field, a wrong type, a bad restart policy."""
    body = manifest(JOBS["one pod set of 2 x 1 GPU"], SETTINGS)
    for path, value in [
        (("spec", "completionsMode"), "Indexed"),
        (("spec", "parallelism"), "two"),
        (("spec", "template", "spec", "containers"), [{"image": "x"}]),  # no name
    ]:
        broken = copy.deepcopy(body)
        target = broken
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        with pytest.raises(kubernetes_validate.ValidationError):
            validate_job(broken)


def test_the_jobset_schema_refuses_what_the_api_server_would() -> None:
    body = manifest(GANGS["launcher and workers on two flavors"], SETTINGS)
    for mutate, where in (
        (lambda b: b["spec"].update(replicatedJob=[]), "spec.replicatedJob"),  # misspelled
        (lambda b: b["spec"]["failurePolicy"].update(maxRestarts="0"), "maxRestarts"),
        (lambda b: b["spec"]["replicatedJobs"][0].update(replicas=[1]), "replicas"),
        (lambda b: b["spec"]["replicatedJobs"][0].pop("name"), "name"),
        (lambda b: b["spec"]["replicatedJobs"][1]["template"]["spec"].update(paralelism=2),
         "template.spec.paralelism"),
    ):  # fmt: skip
        broken = copy.deepcopy(body)
        mutate(broken)
        with pytest.raises((JobSetInvalidError, jsonschema.ValidationError), match=where):
            validate_jobset(broken)
