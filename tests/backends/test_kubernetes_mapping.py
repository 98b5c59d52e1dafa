"""The Kubernetes adapter's mapping, table by table: a gang -> the Job or JobSet fields
that matter, a Job or JobSet (conditions, counts, times) -> JobStatus, names and labels ->
what Kubernetes accepts. The manifests' validity against the official schemas is in
tests/kubernetes/test_manifest_schemas.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gateway.backends import JobRejectedError, JobSpec, JobState, PodShape
from gateway.backends.kubernetes.mapping import (
    KubernetesJobSettings,
    Placement,
    job_status,
    jobset_status,
    label_value,
    manifest,
    object_name,
)

GIB = 2**30
H100 = Placement({"gpu": "h100"}, ({"key": "gpu", "operator": "Exists"},))
SETTINGS = KubernetesJobSettings("ns", "img:1", flavors={"h100": H100})
T0 = "2026-11-25T10:00:00Z"
T1 = "2026-11-25T10:05:00Z"


def spec(*pods: PodShape, runtime: int = 3600) -> JobSpec:
    return JobSpec(
        "abc-2", ("train", "--fast"), {"SEED": "1"}, runtime, pods=pods, tenant="acme", queue="q"
    )


def pod_spec(body: dict[str, Any]) -> dict[str, Any]:
    spec_: dict[str, Any] = body["spec"]["template"]["spec"]
    return spec_


@pytest.mark.parametrize(
    ("job", "expected_job", "expected_container"),
    [
        (
            spec(PodShape(2, gpus=1, cpu_millis=500, flavor="h100")),
            {"completions": 2, "parallelism": 2, "activeDeadlineSeconds": 3600},
            {
                "resources": {
                    "requests": {"cpu": "500m", "nvidia.com/gpu": "1"},
                    "limits": {"nvidia.com/gpu": "1"},
                }
            },
        ),
        (
            spec(PodShape(4, gpus=8, memory_bytes=64 * GIB), runtime=61),
            {"completions": 4, "parallelism": 4, "activeDeadlineSeconds": 61},
            {
                "resources": {
                    "requests": {"memory": str(64 * GIB), "nvidia.com/gpu": "8"},
                    "limits": {"memory": str(64 * GIB), "nvidia.com/gpu": "8"},
                }
            },
        ),
        (spec(), {"completions": 1, "parallelism": 1}, {}),
    ],
)
def test_one_pod_set_is_an_indexed_job(
    job: JobSpec, expected_job: dict[str, Any], expected_container: dict[str, Any]
) -> None:
    body = manifest(job, SETTINGS)
    assert body["kind"] == "Job" and body["metadata"]["name"] == "abc-2"
    assert body["metadata"]["namespace"] == "ns"
    fixed = {"completionMode": "Indexed", "backoffLimit": 0, "suspend": False}
    assert {k: body["spec"][k] for k in [*expected_job, *fixed]} == {**expected_job, **fixed}
    container = pod_spec(body)["containers"][0]
    assert container["command"] == ["train", "--fast"] and container["image"] == "img:1"
    assert {"name": "SEED", "value": "1"} in container["env"]
    assert container.get("resources", {}) == expected_container.get("resources", {})
    assert pod_spec(body)["restartPolicy"] == "Never"
    assert pod_spec(body)["automountServiceAccountToken"] is False


def test_the_flavor_places_the_pods_and_an_unplaced_flavor_adds_nothing() -> None:
    placed = pod_spec(manifest(spec(PodShape(1, flavor="h100")), SETTINGS))
    assert placed["nodeSelector"] == {"gpu": "h100"}
    assert placed["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    unplaced = pod_spec(manifest(spec(PodShape(1, flavor="a100")), SETTINGS))
    assert "nodeSelector" not in unplaced and "tolerations" not in unplaced


def test_labels_and_annotations_name_workload_tenant_queue_and_attempt() -> None:
    body = manifest(spec(PodShape(1)), SETTINGS)
    labels = body["metadata"]["labels"]
    assert {k: labels[k] for k in labels if k.startswith("ignara.io/")} == {
        "ignara.io/job": "abc-2",
        "ignara.io/workload": "abc",
        "ignara.io/attempt": "2",
        "ignara.io/tenant": "acme",
        "ignara.io/queue": "q",
    }
    assert labels["app.kubernetes.io/managed-by"] == "ignara-gateway"
    assert body["metadata"]["annotations"]["ignara.io/tenant"] == "acme"
    assert pod_spec(body) and body["spec"]["template"]["metadata"]["labels"]["ignara.io/job"] == (
        "abc-2"
    )


def test_several_pod_sets_are_a_jobset_with_one_replicated_job_each() -> None:
    job = spec(
        PodShape(1, cpu_millis=1000, name="launcher"),
        PodShape(4, gpus=8, name="workers", flavor="h100"),
    )
    body = manifest(job, SETTINGS)
    assert body["kind"] == "JobSet" and body["spec"]["suspend"] is False
    assert body["spec"]["failurePolicy"] == {"maxRestarts": 0}
    replicated = body["spec"]["replicatedJobs"]
    assert [(r["name"], r["replicas"]) for r in replicated] == [("launcher", 1), ("workers", 1)]
    workers = replicated[1]["template"]["spec"]
    assert (workers["completions"], workers["parallelism"], workers["backoffLimit"]) == (4, 4, 0)
    assert workers["template"]["spec"]["nodeSelector"] == {"gpu": "h100"}
    assert "managed-by" not in str(replicated[1]["template"]["metadata"]["labels"])


def test_several_pod_sets_without_jobset_are_rejected() -> None:
    settings = KubernetesJobSettings("ns", "img:1", use_jobset=False)
    with pytest.raises(JobRejectedError, match="use_jobset"):
        manifest(spec(PodShape(1, name="a"), PodShape(1, name="b")), settings)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("abc-1", "abc-1"),
        ("0123456789abcdef0123456789abcdef-12", "0123456789abcdef0123456789abcdef-12"),
        ("-abc-1", "abc-1-"),  # prefix of a hashed form
        ("a" * 41, "a" * 31 + "-"),
    ],
)
def test_object_names_are_short_dns_labels(name: str, expected: str) -> None:
    got = object_name(name)
    assert got.startswith(expected) and len(got) <= 40
    assert got[0].isalnum() and got[-1].isalnum()


@pytest.mark.parametrize(
    ("text", "unchanged"),
    [("acme", True), ("team-a.b_c", True), ("Acme Inc", False), ("-x-", False), ("x" * 64, False)],
)
def test_label_values_are_sanitized_and_stay_distinct(text: str, unchanged: bool) -> None:
    value = label_value(text)
    assert (value == text) is unchanged
    assert len(value) <= 63 and value[0].isalnum() and value[-1].isalnum()
    assert label_value(text + "!") != value


def obj(status: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {"metadata": {"name": "abc-2", "namespace": "ns", **metadata}, "status": status}


def condition(kind: str, status: str = "True", **rest: str) -> dict[str, str]:
    return {"type": kind, "status": status, "lastTransitionTime": T1, **rest}


@pytest.mark.parametrize(
    ("status", "metadata", "state", "backend_state", "message"),
    [
        ({}, {}, JobState.PENDING, "Pending", "pending on Kubernetes: no pods started yet"),
        (
            {"active": 2, "startTime": T0},
            {},
            JobState.PENDING,
            "Pending",
            "pending on Kubernetes: 2 active, none ready yet",
        ),
        ({"active": 2, "ready": 2, "startTime": T0}, {}, JobState.RUNNING, "Running", ""),
        (
            {"conditions": [condition("Suspended")]},
            {},
            JobState.PENDING,
            "Suspended",
            "Job is suspended on Kubernetes",
        ),
        (
            {
                "succeeded": 2,
                "startTime": T0,
                "completionTime": T1,
                "conditions": [condition("SuccessCriteriaMet"), condition("Complete")],
            },
            {},
            JobState.SUCCEEDED,
            "Complete",
            "",
        ),
        (
            {
                "failed": 1,
                "startTime": T0,
                "conditions": [
                    condition(
                        "Failed",
                        reason="DeadlineExceeded",
                        message="Job was active longer than specified deadline",
                    )
                ],
            },
            {},
            JobState.FAILED,
            "Failed",
            "Job failed: Job was active longer than specified deadline",
        ),
        (
            {"conditions": [condition("Complete", status="False")], "active": 1, "ready": 1},
            {},
            JobState.RUNNING,
            "Running",
            "",
        ),
        (
            {"active": 1, "ready": 1},
            {"deletionTimestamp": T1},
            JobState.RUNNING,
            "Terminating",
            "Job is being deleted",
        ),
    ],
)
def test_a_job_maps_to_a_status(
    status: dict[str, Any],
    metadata: dict[str, Any],
    state: JobState,
    backend_state: str,
    message: str,
) -> None:
    got = job_status(obj(status, **metadata))
    assert (got.state, got.backend_state, got.message) == (state, backend_state, message)
    assert got.backend_job_id == "ns/abc-2"
    if "startTime" in status:
        assert got.started_at == datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
    if state.is_final:
        assert got.finished_at == datetime(2026, 11, 25, 10, 5, tzinfo=UTC)
        assert got.exit_code == (0 if state is JobState.SUCCEEDED else None)


@pytest.mark.parametrize(
    ("status", "state", "backend_state"),
    [
        ({}, JobState.PENDING, "Pending"),
        (
            {"replicatedJobsStatus": [{"name": "a", "active": 1, "ready": 0}]},
            JobState.PENDING,
            "Pending",
        ),
        (
            {
                "replicatedJobsStatus": [
                    {"name": "a", "active": 1, "ready": 1},
                    {"name": "b", "active": 1, "ready": 0},
                ]
            },
            JobState.RUNNING,
            "Running",
        ),
        (
            {"conditions": [condition("Completed")], "terminalState": "Completed"},
            JobState.SUCCEEDED,
            "Complete",
        ),
        (
            {
                "conditions": [
                    condition(
                        "Failed", reason="FailedJobs", message="jobset failed due to failed jobs"
                    )
                ]
            },
            JobState.FAILED,
            "Failed",
        ),
        ({"conditions": [condition("Suspended")]}, JobState.PENDING, "Suspended"),
    ],
)
def test_a_jobset_maps_to_a_status(
    status: dict[str, Any], state: JobState, backend_state: str
) -> None:
    got = jobset_status(obj(status))
    assert (got.state, got.backend_state) == (state, backend_state)
    if state is JobState.FAILED:
        assert got.message == "JobSet failed: jobset failed due to failed jobs"


@pytest.mark.parametrize(
    "garbage",
    [
        {"status": "x"},
        {"metadata": 3, "status": {"conditions": 5}},
        {"status": {"conditions": ["x", None]}},
        {"status": {"conditions": 5, "replicatedJobsStatus": 7}},
    ],
)
def test_unreadable_objects_do_not_end_a_job(garbage: dict[str, Any]) -> None:
    assert job_status(garbage).state is JobState.PENDING
    assert jobset_status(garbage).state is JobState.PENDING
