"""Backend adapters: where admitted workloads run.

Usage::

    from gateway.backends import JobSpec, LocalBackend

    backend = LocalBackend(root)
    await backend.resume()
    await backend.submit(JobSpec("wl-1", ("python", "train.py"), {}, 3600))
    status = await backend.status("wl-1")
"""

from gateway.backends.base import (
    FINAL_STATES,
    MAX_RUNTIME_SECONDS,
    WORKLOAD_ID_PATTERN,
    Backend,
    BackendClosedError,
    BackendError,
    BackendStateError,
    InvalidJobError,
    InvalidWorkloadIdError,
    JobSpec,
    JobState,
    JobStatus,
    validate_workload_id,
)
from gateway.backends.local import (
    CANCELLED_MESSAGE,
    DEFAULT_PATH,
    LOST_MESSAGE,
    MAX_LOG_TAIL_BYTES,
    LocalBackend,
)

__all__ = [
    "CANCELLED_MESSAGE",
    "DEFAULT_PATH",
    "FINAL_STATES",
    "LOST_MESSAGE",
    "MAX_LOG_TAIL_BYTES",
    "MAX_RUNTIME_SECONDS",
    "WORKLOAD_ID_PATTERN",
    "Backend",
    "BackendClosedError",
    "BackendError",
    "BackendStateError",
    "InvalidJobError",
    "InvalidWorkloadIdError",
    "JobSpec",
    "JobState",
    "JobStatus",
    "LocalBackend",
    "validate_workload_id",
]
