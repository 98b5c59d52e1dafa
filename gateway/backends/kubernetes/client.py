"""The few Kubernetes API calls the adapter makes, through lightkube's async client, on
plain dicts (what mapping.py builds and reads), with Kubernetes' answers as backend errors:

- create: 409 AlreadyExists is not an error (the job was submitted before: adopt it);
  400/422 Invalid is :class:`JobRejectedError` (Kubernetes will never take this object);
- get: 404 is ``None``;
- delete: with ``propagationPolicy: Foreground`` (the pods go before the object does);
  404 is not an error (already gone);
- list and watch with ``resourceVersion`` (see watch.py), pod logs;
- 401/403, 429, 5xx and no answer at all: :class:`BackendUnavailableError` (the workload
  waits, nothing is submitted twice); other refusals: :class:`KubernetesError`.

Credentials come from the kubeconfig (or the pod's service account) lightkube reads; they
are never logged or put in a message.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, cast

import httpx2
import yaml
from lightkube import ApiError, AsyncClient, codecs
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.core.exceptions import ConfigError
from lightkube.core.resource import NamespacedResource
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod
from lightkube.types import CascadeType, OnErrorAction, OnErrorResult

from gateway.backends.base import BackendError, BackendUnavailableError, JobRejectedError

__all__ = ["KINDS", "KubeClient", "KubernetesError", "WatchGoneError", "load_config"]

_MAX_MESSAGE = 300


class KubernetesError(BackendError):
    """The API server refused a call for a reason not known to be lasting."""

    code = "kubernetes_error"


class WatchGoneError(KubernetesError):
    """410 Gone: the resourceVersion a watch resumed from is too old; list again."""

    code = "kubernetes_watch_gone"


def _jobset() -> type[NamespacedResource]:
    # Registered in lightkube's resource registry; creating it again returns the same class.
    resource: type[NamespacedResource] = create_namespaced_resource(
        "jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"
    )
    return resource


KINDS: dict[str, Callable[[], type[NamespacedResource]]] = {
    "Job": lambda: Job,
    "JobSet": _jobset,
}


def load_config(kubeconfig: str | None, context: str | None, in_cluster: bool) -> SingleConfig:
    """The cluster and credentials: a kubeconfig file (read now; ``context``, else its
    current context), or the pod's service account. Raises ``BackendUnavailableError``
    saying what is wrong (never what the file holds)."""
    where = "the pod's service account" if in_cluster else f"the kubeconfig {kubeconfig}"
    try:
        if in_cluster:
            config = KubeConfig.from_service_account()
        else:
            config = KubeConfig.from_file(str(kubeconfig))
        single = config.get(context)
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError, ConfigError) as err:
        said = f": {err}" if isinstance(err, ConfigError) else ""
        raise BackendUnavailableError(
            f"cannot use {where} ({type(err).__name__}{said})"[:_MAX_MESSAGE]
        ) from None
    if single is None:  # only with a default, which is not given
        raise BackendUnavailableError(f"{where} names no context")
    return single


def _as_dict(obj: object) -> dict[str, Any]:
    # lightkube's objects (models and generic resources alike) all have to_dict().
    return dict(cast(Any, obj).to_dict())


def _refusal(err: httpx2.HTTPError) -> tuple[int, str, str]:
    """The HTTP status, the Status reason and message of a refusal (0 when unanswered).
    lightkube reads the Status only under exactly ``application/json``; anything between
    the gateway and the API server that adds a charset must not change what it means."""
    if isinstance(err, ApiError):
        return (
            int(err.status.code or 0),
            str(err.status.reason or ""),
            str(err.status.message or ""),
        )
    if not isinstance(err, httpx2.HTTPStatusError):
        return 0, "", ""
    try:
        body = json.loads(err.response.content)
    except (ValueError, httpx2.ResponseNotRead):
        body = None
    if not isinstance(body, dict):
        body = {}
    return err.response.status_code, str(body.get("reason") or ""), str(body.get("message") or "")


def _error(action: str, err: httpx2.HTTPError, *, creating: bool = False) -> BackendError:
    code, reason, message = _refusal(err)
    said = (message or reason)[:_MAX_MESSAGE]
    if code == 0:
        return BackendUnavailableError(
            f"cannot reach the Kubernetes API server while {action} ({type(err).__name__})"
        )
    if code in (401, 403):
        return BackendUnavailableError(
            f"the Kubernetes API server refused the gateway's credentials while {action} "
            f"(HTTP {code}: {said}): check the kubeconfig and its RBAC rights"
        )
    if code in (400, 422) and creating:  # Invalid: this object will never be taken
        return JobRejectedError(f"Kubernetes rejects the job: {said}")
    if code == 410:
        return WatchGoneError(f"the watch's resourceVersion is too old while {action}")
    if code == 429 or code >= 500:
        return BackendUnavailableError(
            f"the Kubernetes API server is unavailable while {action} (HTTP {code})"
        )
    return KubernetesError(f"Kubernetes refused {action} (HTTP {code}: {said})")


class KubeClient:
    """The calls, on one namespace."""

    def __init__(
        self,
        config: SingleConfig,
        namespace: str,
        *,
        timeout: float = 10.0,
    ) -> None:
        self.namespace = namespace
        self._client = AsyncClient(
            config,
            namespace=namespace,
            timeout=httpx2.Timeout(timeout),
            field_manager="ignara-gateway",
        )

    @property
    def server(self) -> str:
        return str(self._client.config.cluster.server)

    async def create(self, manifest: Mapping[str, Any]) -> bool:
        """Create the object; ``False`` when one of that name exists already (adopted)."""
        kind = str(manifest["kind"])
        KINDS[kind]()  # the JobSet resource must be known before decoding it
        obj = cast(NamespacedResource, codecs.from_dict(dict(manifest)))
        name = manifest["metadata"]["name"]
        try:
            await self._client.create(obj)
        except httpx2.HTTPError as err:
            code, reason, message = _refusal(err)
            if code == 409 and reason == "AlreadyExists":
                return False
            if code == 404:
                raise KubernetesError(
                    f"Kubernetes cannot create {kind} {name}: {message[:_MAX_MESSAGE]} (is the "
                    "namespace there, and for a JobSet, the JobSet controller installed?)"
                ) from None
            raise _error(f"creating {kind} {name}", err, creating=True) from None
        return True

    async def get(self, kind: str, name: str) -> dict[str, Any] | None:
        """The object as the API server has it, or ``None`` when there is none."""
        try:
            obj = await self._client.get(KINDS[kind](), name, namespace=self.namespace)
        except httpx2.HTTPError as err:
            if _refusal(err)[0] == 404:
                return None
            raise _error(f"reading {kind} {name}", err) from None
        return _as_dict(obj)

    async def delete(self, kind: str, name: str) -> None:
        """Delete it and, first, its pods (Foreground); one already gone is not an error."""
        try:
            await self._client.delete(
                KINDS[kind](), name, namespace=self.namespace, cascade=CascadeType.FOREGROUND
            )
        except httpx2.HTTPError as err:
            if _refusal(err)[0] == 404:
                return
            raise _error(f"deleting {kind} {name}", err) from None

    async def list_objects(
        self, kind: str, labels: Mapping[str, str]
    ) -> tuple[list[dict[str, Any]], str]:
        """The objects with those labels, and the resourceVersion to watch from."""
        listing = self._client.list(KINDS[kind](), namespace=self.namespace, labels=dict(labels))
        try:
            items = [_as_dict(obj) async for obj in listing]
            return items, listing.resourceVersion
        except httpx2.HTTPError as err:
            raise _error(f"listing {kind}s", err) from None

    async def watch(
        self,
        kind: str,
        labels: Mapping[str, str],
        resource_version: str,
        server_timeout: int,
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Changes after ``resource_version``. When the server ends a watch (its
        ``timeoutSeconds``), lightkube resumes it from the last resourceVersion seen; a 410
        Gone ends it with :class:`WatchGoneError` (the caller lists again)."""
        gone: list[BaseException] = []

        def on_error(err: Exception, count: int) -> OnErrorResult:
            if isinstance(err, httpx2.HTTPError) and _refusal(err)[0] == 410:
                gone.append(err)
                return OnErrorResult(OnErrorAction.STOP)
            return OnErrorResult(OnErrorAction.RAISE)

        stream = self._client.watch(
            KINDS[kind](),
            namespace=self.namespace,
            labels=dict(labels),
            resource_version=resource_version,
            server_timeout=server_timeout,
            on_error=on_error,
        )
        try:
            async for event, obj in stream:
                yield event, _as_dict(obj)
        except httpx2.HTTPError as err:
            raise _error(f"watching {kind}s", err) from None
        if gone:
            raise WatchGoneError(f"the watch of {kind}s from {resource_version} is too old")

    async def pods(self, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """The pods with those labels, by name."""
        try:
            pods = [
                _as_dict(pod)
                async for pod in self._client.list(
                    Pod, namespace=self.namespace, labels=dict(labels)
                )
            ]
        except httpx2.HTTPError as err:
            raise _error("listing pods", err) from None
        return sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name", "")))

    async def pod_logs(self, labels: Mapping[str, str], container: str, tail_lines: int) -> str:
        """The last ``tail_lines`` lines of each pod with those labels, one after another,
        each under a header naming the pod; pods not started yet have none."""
        parts: list[str] = []
        for pod in await self.pods(labels):
            name = str((pod.get("metadata") or {}).get("name", ""))
            try:
                lines = [
                    line
                    async for line in self._client.log(
                        name, namespace=self.namespace, container=container, tail_lines=tail_lines
                    )
                ]
            except httpx2.HTTPError as err:
                if _refusal(err)[0] in (400, 404):
                    continue  # not started yet (400: waiting to start), or gone
                raise _error(f"reading the logs of pod {name}", err) from None
            parts.append(f"==> pod {name} <==\n" + "".join(lines))
        return "".join(parts)

    async def aclose(self) -> None:
        await self._client.close()
