"""Backend adapters: where admitted workloads run.

Usage::

    from gateway.backends import JobSpec, LocalBackend

    backend = LocalBackend(root)
    print(backend.probe().describe())   # which isolation holds here
    await backend.resume()
    await backend.submit(JobSpec("wl-1", ("python3", "train.py"), {}, 3600))
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
    BackendUnavailableError,
    Identifying,
    InvalidJobError,
    InvalidWorkloadIdError,
    JobLimits,
    JobRefusedError,
    JobRejectedError,
    JobSpec,
    JobState,
    JobStatus,
    PassScoped,
    PodShape,
    refusal_of,
    validate_workload_id,
)
from gateway.backends.isolation import Isolation, IsolationMode, IsolationSettings
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
    "BackendUnavailableError",
    "Identifying",
    "InvalidJobError",
    "InvalidWorkloadIdError",
    "Isolation",
    "IsolationMode",
    "IsolationSettings",
    "JobLimits",
    "JobRefusedError",
    "JobRejectedError",
    "JobSpec",
    "JobState",
    "JobStatus",
    "LocalBackend",
    "PassScoped",
    "PodShape",
    "refusal_of",
    "validate_workload_id",
]
