"""What the end-to-end tests of every real backend share: a config whose `h100` flavor
sends admitted work to the backend under test (one queue with 2 GPUs and 8 CPUs), the
2-pod x 1-GPU gang they submit, and waiting for what a gateway answers to change."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

__all__ = ["gang", "gang_config", "until"]


def gang_config(backend: dict[str, Any]) -> dict[str, Any]:
    """The config declaring ``backend`` (and `local`), with the `h100` flavor on it."""
    return {
        "backends": [backend, {"name": "local", "kind": "local"}],
        "flavors": [{"name": "h100", "backend": backend["name"]}],
        "cluster_queues": [
            {
                "name": "team-a",
                "preemption": {"within_cluster_queue": "LowerPriority"},
                "resource_groups": [
                    {
                        "resources": ["nvidia.com/gpu", "cpu"],
                        "flavors": [
                            {
                                "name": "h100",
                                "quotas": {
                                    "nvidia.com/gpu": {"nominal": 2},
                                    "cpu": {"nominal": "8"},
                                },
                            }
                        ],
                    }
                ],
            }
        ],
        "tenants": [{"name": "alpha", "queues": ["team-a"]}],
    }


def gang(name: str, command: str, priority: int = 0) -> dict[str, Any]:
    """2 pods x 1 GPU; naming no backend: the h100 flavor sends it to the one declared."""
    return {
        "name": name,
        "queue": "team-a",
        "priority": priority,
        "pod_sets": [
            {"name": "workers", "count": 2, "requests": {"nvidia.com/gpu": 1, "cpu": "500m"}}
        ],
        "max_runtime_seconds": 600,
        "job": {"command": ["/bin/sh", "-c", command]},
    }


def until(
    http: httpx.Client, path: str, done: Callable[[dict[str, Any]], bool], timeout: float = 90
) -> dict[str, Any]:
    """What ``GET path`` answers once ``done`` holds of it, asking every 0.3 s."""
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, Any] = http.get(path).json()
        if done(body):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.3)
