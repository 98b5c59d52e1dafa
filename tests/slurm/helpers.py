"""What the Slurm end-to-end tests share: the config declaring the Slurm backend, a
2-pod x 1-GPU gang, and reading jobs back from slurmrestd itself."""

from __future__ import annotations

from typing import Any

from tests.support.slurm import SlurmCluster

TOKEN_ENV = "IGNARA_SLURM_TOKEN"


def config(cluster: SlurmCluster, url: str | None = None) -> dict[str, Any]:
    return {
        "backends": [
            {
                "name": "hpc",
                "kind": "slurm",
                "url": url or cluster.url,
                "timeout_seconds": 2,
                "token_env": TOKEN_ENV,
                "user": cluster.user,
                "partition": cluster.partition,
                "api_version": "v0.0.38",
                "output_dir": str(cluster.directory / "gateway-jobs"),
            },
            {"name": "local", "kind": "local"},
        ],
        "flavors": [{"name": "h100", "backend": "hpc"}],
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
    """2 pods x 1 GPU; naming no backend: the h100 flavor sends it to Slurm."""
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


def slurm_job(cluster: SlurmCluster, job_id: str) -> dict[str, Any]:
    [job] = cluster.rest("GET", f"/job/{job_id}")["jobs"]  # type: ignore[misc]
    assert isinstance(job, dict)
    return job


def jobs_named(cluster: SlurmCluster, name: str) -> list[dict[str, Any]]:
    jobs = cluster.rest("GET", "/jobs")["jobs"]
    assert isinstance(jobs, list)
    return [j for j in jobs if j["name"] == name]
