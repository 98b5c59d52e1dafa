"""``KubernetesBackend``: admitted gangs as indexed Jobs or JobSets on a Kubernetes cluster.

- submit: create the object named ``object_name(<workload>-<attempt>)``; 409 AlreadyExists
  means a gateway submitted it before (e.g. one that crashed before noting it): adopted;
- status: from the object's conditions and counts (mapping.py), as the followers (list +
  watch, watch.py) last saw it, else as the API server answers a GET; no object: unknown;
- cancel (and preemption): delete with foreground propagation; the object stays, being
  deleted, until its pods are gone, so the dispatcher keeps asking until it is unknown;
- logs: the tails of the job's pods' logs;
- a kubeconfig that cannot be read, or an API server that does not answer:
  :class:`BackendUnavailableError` from every call; the workload waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable

from lightkube.config.kubeconfig import SingleConfig

from gateway.backends.base import (
    BackendClosedError,
    BackendUnavailableError,
    JobSpec,
    JobState,
    JobStatus,
    validate_workload_id,
)
from gateway.backends.kubernetes.client import KubeClient
from gateway.backends.kubernetes.mapping import (
    CONTAINER,
    LABEL_JOB,
    MANAGED_BY,
    KubernetesJobSettings,
    job_status,
    jobset_status,
    manifest,
    object_name,
    pod_exit_code,
)
from gateway.backends.kubernetes.watch import Follower

__all__ = ["KubernetesBackend"]

log = logging.getLogger(__name__)

_MAX_TAIL = 8 * 1024 * 1024
_READERS = {"Job": job_status, "JobSet": jobset_status}


class KubernetesBackend:
    """One namespace of a Kubernetes cluster. ``config`` gives the cluster and credentials
    (``client.load_config``): called once, now; if it fails, every call says why."""

    def __init__(
        self,
        name: str,
        settings: KubernetesJobSettings,
        config: Callable[[], SingleConfig],
        *,
        timeout: float = 10.0,
        follow: bool = True,
        watch_timeout: int = 300,
    ) -> None:
        self.name = name
        self.settings = settings
        self.client: KubeClient | None = None
        self._broken = ""
        try:
            self.client = KubeClient(config(), settings.namespace, timeout=timeout)
        except BackendUnavailableError as err:
            self._broken = str(err)
            log.warning("backend %s: %s; its workloads wait", name, err)
        self._kinds = ("Job", "JobSet") if settings.use_jobset else ("Job",)
        self.followers: dict[str, Follower] = {}
        if self.client is not None and follow:
            self.followers = {
                kind: Follower(self.client, kind, dict([MANAGED_BY]), server_timeout=watch_timeout)
                for kind in self._kinds
            }
        self._tasks: list[asyncio.Task[None]] = []
        self._kind_of: dict[str, str] = {}  # object name -> its kind, as created or seen
        self._closed = False

    def __repr__(self) -> str:
        server = self.client.server if self.client is not None else "?"
        return f"KubernetesBackend({self.name!r}, {server!r}, {self.settings.namespace!r})"

    async def submit(self, job: JobSpec) -> bool:
        """Create ``job``'s object; True when it existed already (the dispatcher adopts it)."""
        client = self._client()
        body = manifest(job, self.settings)
        kind, name = str(body["kind"]), str(body["metadata"]["name"])
        created = await client.create(body)
        self._kind_of[name] = kind
        log.info(
            "%s %s %s on %s as %s/%s",
            "submitted" if created else "adopted the existing",
            kind,
            job.workload_id,
            self.name,
            self.settings.namespace,
            name,
        )
        return not created

    async def status(self, workload_id: str) -> JobStatus:
        client = self._client()
        name = object_name(validate_workload_id(workload_id))
        for kind in self._order(name):
            follower = self.followers.get(kind)
            seen = follower.get(name) if follower is not None else None
            if seen is None:
                seen = await client.get(kind, name)
            if seen is not None:
                self._kind_of[name] = kind
                status = _READERS[kind](seen)
                if status.state is JobState.FAILED:
                    status = await self._with_exit_code(client, name, status)
                return status
        return JobStatus(
            JobState.UNKNOWN,
            message=f"Kubernetes has no Job or JobSet {self.settings.namespace}/{name}",
        )

    async def cancel(self, workload_id: str) -> None:
        client = self._client()
        name = object_name(validate_workload_id(workload_id))
        kinds = [self._kind_of[name]] if name in self._kind_of else list(self._kinds)
        for kind in kinds:
            await client.delete(kind, name)

    async def logs(self, workload_id: str, tail_bytes: int = 65536) -> bytes:
        client = self._client()
        name = object_name(validate_workload_id(workload_id))
        tail = max(0, min(tail_bytes, _MAX_TAIL))
        if tail == 0:
            return b""
        # Lines, not bytes, is what the API tails by; a line is rarely under 16 bytes.
        text = await client.pod_logs({LABEL_JOB: name}, CONTAINER, max(1, tail // 16))
        return text.encode()[-tail:]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.client is not None:
            await self.client.aclose()

    async def _with_exit_code(self, client: KubeClient, name: str, status: JobStatus) -> JobStatus:
        """A failed job's exit code: its first pod that exited non-zero (Kubernetes keeps
        it on the pod, not on the Job)."""
        failed = pod_exit_code(await client.pods({LABEL_JOB: name}))
        if failed is None:
            return status
        pod, code = failed
        return dataclasses.replace(
            status, exit_code=code, message=f"{status.message} (pod {pod} exited with {code})"
        )

    def _order(self, name: str) -> list[str]:
        known = self._kind_of.get(name)
        return [known] if known is not None else list(self._kinds)

    def _client(self) -> KubeClient:
        if self._closed:
            raise BackendClosedError()
        if self.client is None:
            raise BackendUnavailableError(self._broken)
        if self.followers and not self._tasks:
            # Started on first use: the backend is built outside any event loop.
            self._tasks = [
                asyncio.get_running_loop().create_task(f.run(), name=f"k8s-follow-{k}")
                for k, f in self.followers.items()
            ]
        return self.client
