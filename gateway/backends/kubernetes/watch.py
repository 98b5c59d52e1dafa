"""Following the gateway's Jobs (or JobSets) on a cluster: list, then watch from the list's
resourceVersion, keeping the objects as the API server last showed them.

- a watch the server ends (its ``timeoutSeconds``) is resumed from the last resourceVersion
  seen (lightkube does this), so no change is missed and none is replayed;
- 410 Gone (that resourceVersion is too old for the server) lists again: objects deleted
  meanwhile drop out, which a watch alone would never tell;
- any other failure: the objects are no longer trusted (``synced`` false: the backend asks
  the API server directly) and the follower lists again after ``retry_seconds``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from gateway.backends.base import BackendError
from gateway.backends.kubernetes.client import KubeClient, WatchGoneError

__all__ = ["Follower"]

log = logging.getLogger(__name__)


class Follower:
    """The objects of one kind that carry ``labels``, by name (``run`` keeps them)."""

    def __init__(
        self,
        client: KubeClient,
        kind: str,
        labels: Mapping[str, str],
        *,
        server_timeout: int = 300,
        retry_seconds: float = 5.0,
    ) -> None:
        self.client = client
        self.kind = kind
        self.labels = dict(labels)
        self.server_timeout = server_timeout
        self.retry_seconds = retry_seconds
        self.objects: dict[str, dict[str, Any]] = {}
        self.synced = False
        self.lists = 0  # how often it listed (a 410 makes it list again)
        self._gone = 0  # 410s in a row, with no event between

    def get(self, name: str) -> dict[str, Any] | None:
        """The object as last seen, or ``None`` (also when the follower is not in step)."""
        return self.objects.get(name) if self.synced else None

    async def run(self) -> None:
        while True:
            try:
                await self._list_and_watch()
            except WatchGoneError:
                log.info("watch of %ss too old: listing them again", self.kind)
                self._gone += 1
                if self._gone > 1:  # 410 again at once: do not hammer the server
                    await asyncio.sleep(self.retry_seconds)
            except BackendError as err:
                self._lost(str(err))
                await asyncio.sleep(self.retry_seconds)
            except Exception:  # the top of a background task: log it and keep following
                log.exception("following %ss failed", self.kind)
                self._lost("unexpected error")
                await asyncio.sleep(self.retry_seconds)

    def _lost(self, why: str) -> None:
        if self.synced:
            log.warning("not following %ss any more (%s); will list again", self.kind, why)
        self.synced = False

    async def _list_and_watch(self) -> None:
        items, version = await self.client.list_objects(self.kind, self.labels)
        self.lists += 1
        self.objects = {_name(obj): obj for obj in items if _name(obj)}
        self.synced = True
        stream = self.client.watch(self.kind, self.labels, version, self.server_timeout)
        async for event, obj in stream:
            self._gone = 0
            name = _name(obj)
            if not name:
                continue  # a BOOKMARK carries only a resourceVersion
            if event == "DELETED":
                self.objects.pop(name, None)
            elif event in ("ADDED", "MODIFIED"):
                self.objects[name] = obj


def _name(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else ""
