"""A FAKE Kubernetes API server for tests: NOT Kubernetes, and nothing runs on it.

No real API server can run on this machine (shared/notes/backends.md §3). This one speaks
the Kubernetes REST protocol for the few paths the Kubernetes backend uses, as the real one
answers them, on 127.0.0.1 (aiohttp), so the real client (lightkube) is tested over HTTP:

- ``POST   /apis/batch/v1/namespaces/{ns}/jobs`` (and ``/apis/jobset.x-k8s.io/v1alpha2/
  .../jobsets``): create; a second create of a name is 409 ``AlreadyExists``;
- ``GET    .../{name}``: get, 404 ``NotFound`` for none;
- ``DELETE .../{name}?propagationPolicy=Foreground``: the object gets a
  ``deletionTimestamp`` and goes when its dependents would (at once, or when the test calls
  :meth:`FakeKubeApi.collect_garbage` if ``hold_deletions``); 404 for none;
- ``GET    .../jobs?labelSelector=k=v``: list with the collection's ``resourceVersion``;
- ``GET    .../jobs?watch=true&resourceVersion=N``: the changes after N as JSON lines
  (ADDED / MODIFIED / DELETED), held open until the test ends the watch
  (:meth:`end_watches`, like the server's ``timeoutSeconds``) or ``timeoutSeconds``
  passes; after :meth:`compact`, a watch from an older version gets the ``ERROR`` event
  with a 410 ``Expired`` Status, as the real server sends it;
- ``GET    /api/v1/namespaces/{ns}/pods?labelSelector=...`` and ``.../pods/{name}/log``.

What it does not do: schedule, run or validate anything (the manifests are validated
against the real schemas elsewhere); a job's status changes only when the test sets it
(:meth:`set_status`).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

__all__ = ["FakeKubeApi", "Request"]

_KINDS = {
    ("batch", "v1", "jobs"): ("Job", "batch/v1"),
    ("jobset.x-k8s.io", "v1alpha2", "jobsets"): ("JobSet", "jobset.x-k8s.io/v1alpha2"),
    ("", "v1", "pods"): ("Pod", "v1"),
}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any = None


@dataclass
class _Event:
    version: int
    resource: str
    kind: str
    obj: dict[str, Any]


@dataclass
class _Watch:
    ended: asyncio.Event = field(default_factory=asyncio.Event)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


JSON = "application/json"  # exactly so, as the API server sends it


def _json(body: Any, status: int = 200, content_type: str = JSON) -> web.Response:
    return web.Response(
        body=json.dumps(body).encode(), status=status, headers={"Content-Type": content_type}
    )


def _status(
    code: int,
    reason: str,
    message: str,
    name: str = "",
    kind: str = "",
    content_type: str = JSON,
) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {"name": name, "kind": kind},
        "code": code,
    }
    return _json(body, code, content_type)


def _matches(obj: dict[str, Any], selector: str) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class FakeKubeApi:
    """The fake server; ``await start()`` then point a kubeconfig at it (:meth:`kubeconfig`)."""

    def __init__(self, namespace: str = "training") -> None:
        self.namespace = namespace
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}  # (resource, name) -> obj
        self.version = 100
        self.events: list[_Event] = []
        self.requests: list[Request] = []
        self.logs: dict[str, str] = {}  # pod name -> its log
        self.compacted = 0  # watches from a version below this get 410 Expired
        self.hold_deletions = False
        # What a proxy in between might do: Status bodies under another content type, and a
        # watch from a forgotten version refused with HTTP 410 instead of an ERROR event.
        self.status_content_type = JSON
        self.gone_as_http = False
        self._watches: list[_Watch] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    # --- the test's controls ----------------------------------------------------------

    async def start(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        self.end_watches()
        if self._runner is not None:
            await self._runner.cleanup()

    def kubeconfig(self, folder: Path, context: str = "fake") -> Path:
        """A kubeconfig for this server (a token that is checked: a wrong one is 401)."""
        path = folder / "kubeconfig"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": context,
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "gw", "user": {"token": "fake-token"}}],
                    "contexts": [
                        {
                            "name": context,
                            "context": {"cluster": "fake", "user": "gw", "namespace": "x"},
                        }
                    ],
                }
            )
        )
        return path

    def get(self, resource: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((resource, name))

    def set_status(self, resource: str, name: str, status: dict[str, Any]) -> None:
        obj = self.objects[(resource, name)]
        obj["status"] = status
        self._changed(resource, "MODIFIED", obj)

    def add_pod(
        self, name: str, labels: dict[str, str], log: str, exit_code: int | None = None
    ) -> None:
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace, "labels": labels},
            "spec": {"containers": [{"name": "job", "image": "x"}]},
        }
        if exit_code is not None:
            terminated = {"exitCode": exit_code, "reason": "Error" if exit_code else "Completed"}
            pod["status"] = {
                "phase": "Failed" if exit_code else "Succeeded",
                "containerStatuses": [
                    {
                        "name": "job",
                        "image": "x",
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {"terminated": terminated},
                    }
                ],
            }
        self.objects[("pods", name)] = pod
        self.logs[name] = log

    def end_watches(self) -> None:
        """End every open watch normally, as the server does at its timeoutSeconds."""
        for watch in self._watches:
            watch.ended.set()
        self._watches.clear()

    def compact(self) -> None:
        """Forget the history: a watch resuming from any version seen so far gets 410 (other
        writes went on meanwhile: the version moves on, and a new list is at that version)."""
        self.version += 1
        self.compacted = self.version
        self.end_watches()

    def collect_garbage(self) -> None:
        """Finish the deletions held back (``hold_deletions``): the objects go."""
        for (resource, name), obj in list(self.objects.items()):
            if obj["metadata"].get("deletionTimestamp"):
                self._remove(resource, name)

    def watches_from(self, resource: str) -> list[str | None]:
        """The resourceVersion each watch of ``resource`` asked to start from."""
        return [
            r.query.get("resourceVersion")
            for r in self.requests
            if r.query.get("watch") == "true" and r.path.endswith(f"/{resource}")
        ]

    def lists_of(self, resource: str) -> int:
        return sum(
            1
            for r in self.requests
            if r.method == "GET" and r.path.endswith(f"/{resource}") and "watch" not in r.query
        )

    # --- the protocol -----------------------------------------------------------------

    def _changed(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.events.append(_Event(self.version, resource, kind, json.loads(json.dumps(obj))))
        for waiter in list(self._waiters):  # open watches send what is new
            if not waiter.done():
                waiter.set_result(None)

    def _remove(self, resource: str, name: str) -> None:
        obj = self.objects.pop((resource, name))
        self._changed(resource, "DELETED", obj)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        response = await self._answer(request)
        if response.status >= 400 and self.status_content_type != JSON:
            response.headers["Content-Type"] = self.status_content_type
        return response

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        body = None
        if request.can_read_body:
            body = await request.json()
        query = dict(request.query)
        self.requests.append(Request(request.method, request.path, query, body))
        if request.headers.get("Authorization") != "Bearer fake-token":
            return _status(401, "Unauthorized", "Unauthorized")
        parts = request.path.strip("/").split("/")
        # /api/v1/namespaces/{ns}/{resource}[/{name}[/log]]
        # /apis/{group}/{version}/namespaces/{ns}/{resource}[/{name}]
        if parts[0] == "api":
            group, rest = "", parts[1:]
        elif parts[0] == "apis" and len(parts) > 2:
            group, rest = parts[1], parts[2:]
        else:
            return _status(404, "NotFound", "the server could not find the requested resource")
        if len(rest) < 4 or rest[1] != "namespaces":
            return _status(404, "NotFound", "the server could not find the requested resource")
        version, namespace, resource = rest[0], rest[2], rest[3]
        if (group, version, resource) not in _KINDS or namespace != self.namespace:
            return _status(404, "NotFound", "the server could not find the requested resource")
        name = rest[4] if len(rest) > 4 else ""
        sub = rest[5] if len(rest) > 5 else ""
        kind, api_version = _KINDS[(group, version, resource)]
        if not name and request.method == "POST":
            return self._create(resource, kind, api_version, body)
        if not name and request.method == "GET" and query.get("watch") == "true":
            return await self._watch(request, resource, query)
        if not name and request.method == "GET":
            return self._list(resource, kind, api_version, query)
        obj = self.objects.get((resource, name))
        if obj is None:
            return _status(404, "NotFound", f'{resource} "{name}" not found', name, kind)
        if sub == "log" and request.method == "GET":
            text = self.logs.get(name, "")
            tail = int(query.get("tailLines", "0") or 0)
            lines = text.splitlines(keepends=True)
            return web.Response(text="".join(lines[-tail:] if tail else lines))
        if request.method == "GET" and not sub:
            return _json(obj)
        if request.method == "DELETE" and not sub:
            obj["metadata"]["deletionTimestamp"] = _now()
            if query.get("propagationPolicy") == "Foreground":
                obj["metadata"]["finalizers"] = ["foregroundDeletion"]
            self._changed(resource, "MODIFIED", obj)
            answer = json.loads(json.dumps(obj))
            if not self.hold_deletions:
                self._remove(resource, name)
            return _json(answer)
        return _status(405, "MethodNotAllowed", "the server does not allow this method")

    def _create(self, resource: str, kind: str, api_version: str, body: Any) -> web.StreamResponse:
        if not isinstance(body, dict) or body.get("kind") != kind:
            return _status(400, "BadRequest", f"the body is not a {kind}")
        name = body.get("metadata", {}).get("name", "")
        if (resource, name) in self.objects:
            group = api_version.split("/")[0] if "/" in api_version else ""
            return _status(
                409, "AlreadyExists", f'{resource}.{group} "{name}" already exists', name, kind
            )
        obj = json.loads(json.dumps(body))
        obj["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=_now())
        obj["metadata"]["namespace"] = self.namespace
        obj.setdefault("status", {})
        self.objects[(resource, name)] = obj
        self._changed(resource, "ADDED", obj)
        return _json(obj, status=201)

    def _list(
        self, resource: str, kind: str, api_version: str, query: dict[str, str]
    ) -> web.StreamResponse:
        selector = query.get("labelSelector", "")
        items = [
            obj
            for (r, _), obj in sorted(self.objects.items())
            if r == resource and _matches(obj, selector)
        ]
        return _json(
            {
                "kind": f"{kind}List",
                "apiVersion": api_version,
                "metadata": {"resourceVersion": str(self.version)},
                "items": items,
            }
        )

    async def _watch(
        self, request: web.Request, resource: str, query: dict[str, str]
    ) -> web.StreamResponse:
        since = int(query.get("resourceVersion") or 0)
        selector = query.get("labelSelector", "")
        if since and since < self.compacted and self.gone_as_http:
            return _status(410, "Expired", f"too old resource version: {since}")
        response = web.StreamResponse(headers={"Content-Type": JSON})
        await response.prepare(request)
        if since and since < self.compacted:
            status = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {since} ({self.compacted})",
                "reason": "Expired",
                "code": 410,
            }
            await response.write(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
            await response.write_eof()
            return response
        if not since:  # no version: the current objects first, as ADDED
            for (r, _), obj in sorted(self.objects.items()):
                if r == resource and _matches(obj, selector):
                    line = json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n"
                    await response.write(line)
            since = self.version
        watch = _Watch()
        self._watches.append(watch)
        timeout = float(query.get("timeoutSeconds") or 3600)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while not watch.ended.is_set() and loop.time() < deadline:
                for event in [e for e in self.events if e.version > since]:
                    since = event.version
                    if event.resource == resource and _matches(event.obj, selector):
                        line = {"type": event.kind, "object": event.obj}
                        await response.write(json.dumps(line).encode() + b"\n")
                waiter = loop.create_future()
                self._waiters.append(waiter)
                ended = asyncio.ensure_future(watch.ended.wait())
                try:
                    await asyncio.wait(
                        [waiter, ended],
                        timeout=max(0.0, deadline - loop.time()),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    ended.cancel()
                    self._waiters.remove(waiter)
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client went away
        return response
