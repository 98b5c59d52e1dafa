"""From the gateway's job to Kubernetes manifests, and from a Job or JobSet back to a
JobStatus: pure functions on plain dicts (what goes on the wire), so the mapping is tested
by tables and every manifest is checked against the official schemas
(tests/kubernetes/test_manifest_schemas.py).

- a gang of one pod set: an indexed ``batch/v1`` Job (``completionMode: Indexed``,
  parallelism = completions = its pods);
- a gang of several pod sets: a ``jobset.x-k8s.io/v1alpha2`` JobSet, one replicated job
  (an indexed Job as above) per pod set, when the backend's ``use_jobset`` allows it.

Every object is created running (``suspend: false``: admission already happened in the
gateway), never retried by Kubernetes (``backoffLimit: 0``, ``restartPolicy: Never``, no
JobSet restarts: a failure is the gateway's to requeue), and bounded by the workload's max
runtime (``activeDeadlineSeconds``), and deleted by Kubernetes a while after it ends
(``ttlSecondsAfterFinished``, the backend's setting). Pods get no service account token:
a job never runs with the gateway's (or anyone's) powers on the cluster. The workload's
``kubernetes`` section (options.py) adds node labels, tolerations, pod labels and
annotations and a working directory; the flavor's placement and the gateway's labels win.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from gateway.backends.base import JobRejectedError, JobSpec, JobState, JobStatus
from gateway.backends.kubernetes.options import KubernetesOptions

__all__ = [
    "GPU_RESOURCE",
    "JOBSET_API_VERSION",
    "LABEL_JOB",
    "MANAGED_BY",
    "KubernetesJobSettings",
    "Placement",
    "job_status",
    "jobset_status",
    "label_value",
    "manifest",
    "object_name",
    "pod_exit_code",
]

JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
GPU_RESOURCE = "nvidia.com/gpu"
_PREFIX = "ignara.io/"
LABEL_JOB = f"{_PREFIX}job"  # on the object and its pods: which gateway job they belong to
MANAGED_BY = ("app.kubernetes.io/managed-by", "ignara-gateway")
CONTAINER = "job"
_DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_NOT_LABEL_CHAR = re.compile(r"[^A-Za-z0-9_.-]+")
# Pods of an indexed Job are named <job>-<index>-<5 random>, and a JobSet's are
# <jobset>-<replicated job>-<job index>-<pod index>-<5 random>; both must stay within 63.
_MAX_NAME = 40
_MAX_POD_SET_NAME = 12


@dataclass(frozen=True)
class Placement:
    """Where a flavor's pods go: node labels to select and taints to tolerate (each a
    core/v1 Toleration as Kubernetes spells it)."""

    node_labels: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class KubernetesJobSettings:
    """What the backend's config adds to every job."""

    namespace: str
    image: str
    use_jobset: bool = True
    flavors: Mapping[str, Placement] = field(default_factory=dict)
    # A finished Job or JobSet is deleted by Kubernetes this long after it ended. Until the
    # gateway has seen the end, it needs the object: one gone before is taken as lost (run
    # again), so this is longer than any outage of the gateway's is expected to be.
    ttl_seconds_after_finished: int = 7 * 86400


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def object_name(job_name: str) -> str:
    """The Job or JobSet name for a gateway job (``<workload>-<attempt>``): itself when it is
    a DNS-1123 label short enough for its pods' names, else a shortened, hashed form that
    is still unique."""
    if len(job_name) <= _MAX_NAME and _DNS_LABEL.fullmatch(job_name):
        return job_name
    stem = re.sub(r"[^a-z0-9-]+", "-", job_name.lower()).strip("-")[: _MAX_NAME - 9].strip("-")
    return f"{stem or 'job'}-{_digest(job_name, 8)}"


def label_value(text: str) -> str:
    """``text`` as a Kubernetes label value (at most 63 of ``[A-Za-z0-9_.-]``, beginning and
    ending alphanumeric); what does not fit is replaced, and a changed value gets a hash so
    two different texts never share a label. The exact text goes in an annotation."""
    cleaned = _NOT_LABEL_CHAR.sub("-", text).strip("-_.")
    if cleaned == text and len(text) <= 63:
        return text
    return f"{cleaned[:54].strip('-_.')}-{_digest(text, 8)}".lstrip("-")


def _split_job_name(job_name: str) -> tuple[str, str]:
    """The workload id and attempt in ``<workload>-<attempt>`` (the dispatcher's naming);
    ("", "") when the name is not of that form."""
    workload, _, attempt = job_name.rpartition("-")
    return (workload, attempt) if workload and attempt.isdigit() else (job_name, "")


def _metadata(spec: JobSpec, name: str) -> tuple[dict[str, str], dict[str, str]]:
    workload, attempt = _split_job_name(spec.workload_id)
    exact = {"workload": workload, "attempt": attempt, "tenant": spec.tenant, "queue": spec.queue}
    labels = {LABEL_JOB: name}
    labels.update({f"{_PREFIX}{k}": label_value(v) for k, v in exact.items() if v})
    annotations = {f"{_PREFIX}{k}": v for k, v in exact.items() if v}
    annotations[f"{_PREFIX}job-name"] = spec.workload_id
    return labels, annotations


def _quantities(cpu_millis: int | None, memory_bytes: int | None, gpus: int) -> dict[str, Any]:
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if cpu_millis is not None:
        # No CPU limit: a limit throttles a pod below what its node has idle.
        requests["cpu"] = f"{cpu_millis}m"
    if memory_bytes is not None:
        requests["memory"] = limits["memory"] = str(memory_bytes)
    if gpus:
        # An extended resource: Kubernetes needs it in limits (requests must equal it).
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(gpus)
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return resources


def _pod_set_names(spec: JobSpec) -> list[str]:
    """One DNS-1123 name per pod set, unique within the job."""
    names: list[str] = []
    for i, pod in enumerate(spec.pods):
        name = re.sub(r"[^a-z0-9-]+", "-", pod.name.lower()).strip("-")[:_MAX_POD_SET_NAME]
        name = name.strip("-") or f"set{i}"
        if name in names:
            name = f"{name[: _MAX_POD_SET_NAME - 3]}-{i}"
        names.append(name)
    return names


def _job_spec(
    spec: JobSpec,
    settings: KubernetesJobSettings,
    index: int,
    pod_labels: dict[str, str],
    annotations: dict[str, str],
) -> dict[str, Any]:
    pod = spec.pods[index] if spec.pods else None
    count = pod.count if pod is not None else 1
    # Validated by the API before it was stored; converted again, as any stored input.
    asked = msgspec.convert(spec.options.get("kubernetes", {}), KubernetesOptions)
    env = {**spec.env, "IGNARA_JOB": spec.workload_id}
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": settings.image,
        "command": list(spec.command),
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    if asked.working_dir is not None:
        container["workingDir"] = asked.working_dir
    resources = _quantities(pod.cpu_millis, pod.memory_bytes, pod.gpus) if pod else {}
    if resources:
        container["resources"] = resources
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
    }
    placement = settings.flavors.get(pod.flavor) if pod is not None and pod.flavor else None
    placement = placement or Placement()
    # The flavor's node labels win: a section narrows where the pods go, never widens it.
    node_selector = {**(asked.node_selector or {}), **placement.node_labels}
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    tolerations = [dict(t) for t in placement.tolerations]
    tolerations += [t.manifest() for t in asked.tolerations or []]
    if tolerations:
        pod_spec["tolerations"] = tolerations
    # The gateway's labels and annotations win (they find the job's pods).
    metadata = {
        "labels": {**(asked.labels or {}), **pod_labels},
        "annotations": {**(asked.annotations or {}), **annotations},
    }
    return {
        "completionMode": "Indexed",
        "completions": count,
        "parallelism": count,
        "backoffLimit": 0,
        "activeDeadlineSeconds": spec.max_runtime_seconds,
        "suspend": False,
        "template": {"metadata": metadata, "spec": pod_spec},
    }


def manifest(spec: JobSpec, settings: KubernetesJobSettings) -> dict[str, Any]:
    """The object to create for ``spec``: an indexed Job for one pod set (or none), a JobSet
    for several. Raises ``JobRejectedError`` for several pod sets without JobSet."""
    name = object_name(spec.workload_id)
    labels, annotations = _metadata(spec, name)
    metadata = {
        "name": name,
        "namespace": settings.namespace,
        "labels": {**labels, MANAGED_BY[0]: MANAGED_BY[1]},
        "annotations": annotations,
    }
    if len(spec.pods) <= 1:
        job = _job_spec(spec, settings, 0, labels, annotations)
        job["ttlSecondsAfterFinished"] = settings.ttl_seconds_after_finished
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job}
    if not settings.use_jobset:
        raise JobRejectedError(
            f"a gang of {len(spec.pods)} pod sets needs a JobSet, and this Kubernetes backend "
            "has use_jobset: false"
        )
    replicated = []
    for i, set_name in enumerate(_pod_set_names(spec)):
        pod_labels = {**labels, f"{_PREFIX}pod-set": set_name}
        replicated.append(
            {
                "name": set_name,
                "replicas": 1,
                "template": {
                    # Not managed-by: the gateway follows the JobSet, not its child Jobs.
                    "metadata": {"labels": dict(labels), "annotations": dict(annotations)},
                    "spec": _job_spec(spec, settings, i, pod_labels, annotations),
                },
            }
        )
    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "suspend": False,
            "failurePolicy": {"maxRestarts": 0},
            # The JobSet's own (its child Jobs go with it).
            "ttlSecondsAfterFinished": settings.ttl_seconds_after_finished,
            "replicatedJobs": replicated,
        },
    }


def _time(text: object) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    conditions = status.get("conditions")
    for condition in conditions if isinstance(conditions, list) else []:
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == kind
            and condition.get("status") == "True"
        ):
            return condition
    return None


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _ended(status: Mapping[str, Any], kind: str) -> tuple[JobState, Mapping[str, Any] | None]:
    for word, state in (("Complete", JobState.SUCCEEDED), ("Failed", JobState.FAILED)):
        if kind == "JobSet" and word == "Complete":
            word = "Completed"  # the JobSet's condition is spelled so
        if (condition := _condition(status, word)) is not None:
            return state, condition
    return JobState.UNKNOWN, None


def _common(
    obj: Mapping[str, Any], kind: str, ready: int, active: int, started: datetime | None
) -> JobStatus:
    """The status of a Job or JobSet from its conditions and pod (Job) or child job
    (JobSet) counts."""
    metadata = obj.get("metadata") or {}
    status = obj.get("status") or {}
    if not isinstance(status, Mapping) or not isinstance(metadata, Mapping):
        status, metadata = {}, {}
    backend_id = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
    state, condition = _ended(status, kind)
    if condition is not None:
        said = str(condition.get("message") or condition.get("reason") or "")[:500]
        finished = _time(status.get("completionTime")) or _time(condition.get("lastTransitionTime"))
        succeeded = state is JobState.SUCCEEDED
        return JobStatus(
            state=state,
            exit_code=0 if succeeded else None,
            started_at=started,
            finished_at=finished,
            message="" if succeeded else f"{kind} failed: {said or 'no reason given'}",
            backend_job_id=backend_id,
            backend_state="Complete" if succeeded else "Failed",
        )
    if metadata.get("deletionTimestamp"):
        # Deleted with foreground propagation: it lasts until its pods are gone.
        return JobStatus(
            JobState.RUNNING,
            started_at=started,
            message=f"{kind} is being deleted",
            backend_job_id=backend_id,
            backend_state="Terminating",
        )
    if _condition(status, "Suspended") is not None or (obj.get("spec") or {}).get("suspend"):
        return JobStatus(
            JobState.PENDING,
            message=f"{kind} is suspended on Kubernetes",
            backend_job_id=backend_id,
            backend_state="Suspended",
        )
    if ready > 0:
        return JobStatus(
            JobState.RUNNING, started_at=started, backend_job_id=backend_id, backend_state="Running"
        )
    waiting = f"{active} active, none ready yet" if active else "no pods started yet"
    return JobStatus(
        JobState.PENDING,
        started_at=started,
        message=f"pending on Kubernetes: {waiting}",
        backend_job_id=backend_id,
        backend_state="Pending",
    )


def job_status(obj: Mapping[str, Any]) -> JobStatus:
    """A batch/v1 Job's status: Complete / Failed conditions end it; while it lasts, it runs
    once a pod is ready (``status.ready``) and is pending before."""
    status = obj.get("status") or {}
    if not isinstance(status, Mapping):
        status = {}
    return _common(
        obj,
        "Job",
        _int(status.get("ready")),
        _int(status.get("active")),
        _time(status.get("startTime")),
    )


def jobset_status(obj: Mapping[str, Any]) -> JobStatus:
    """A JobSet's status: Completed / Failed conditions end it; while it lasts, it runs once
    a child Job is ready (``replicatedJobsStatus[].ready``)."""
    status = obj.get("status") or {}
    if not isinstance(status, Mapping):
        status = {}
    children = status.get("replicatedJobsStatus")
    children = [s for s in children if isinstance(s, Mapping)] if isinstance(children, list) else []
    ready = sum(_int(s.get("ready")) for s in children)
    active = sum(_int(s.get("active")) for s in children)
    return _common(obj, "JobSet", ready, active, None)


def pod_exit_code(pods: list[dict[str, Any]]) -> tuple[str, int] | None:
    """The first pod whose job container ended with a non-zero code, and that code (as the
    kubelet reports it: a signal N shows as 128 + N), or ``None``."""
    for pod in pods:
        status = pod.get("status")
        containers = status.get("containerStatuses") if isinstance(status, Mapping) else None
        for container in containers if isinstance(containers, list) else []:
            if not isinstance(container, Mapping) or container.get("name") != CONTAINER:
                continue
            state = container.get("state")
            ended = state.get("terminated") if isinstance(state, Mapping) else None
            code = ended.get("exitCode") if isinstance(ended, Mapping) else None
            if isinstance(code, int) and not isinstance(code, bool) and code != 0:
                name = (pod.get("metadata") or {}).get("name", "")
                return str(name), code
    return None
