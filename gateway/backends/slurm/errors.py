"""Slurm's refusals as the gateway's backend errors, each with a message saying what to do.

slurmrestd answers most failures with HTTP 500 and Slurm error numbers in ``errors[]``
(shared/notes/backends.md §1): the number, not the status, says what happened.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.backends.base import BackendError, BackendUnavailableError, JobRejectedError
from gateway.backends.slurm.wire import ApiError

__all__ = [
    "INVALID_JOB_ID",
    "REJECTING_ERRORS",
    "SlurmError",
    "SlurmJobNotFoundError",
    "error_for",
]

INVALID_JOB_ID = 2017  # ESLURM_INVALID_JOB_ID
INVALID_PARTITION = 2000  # ESLURM_INVALID_PARTITION_NAME
# The job can never run as asked: retrying the same job cannot help.
REJECTING_ERRORS = {
    2014: "no node can satisfy the request (more GPUs, CPUs or memory than any node has)",
    2015: "the partition cannot satisfy the request",
    2016: "more CPUs than allowed",
}
_MAX_MESSAGE = 500


class SlurmError(BackendError):
    """slurmrestd refused a call for a reason not known to be lasting."""

    code = "slurm_error"


class SlurmJobNotFoundError(SlurmError):
    """Slurm knows no job of that id (error 2017)."""

    code = "slurm_job_not_found"


def _said(errors: Sequence[ApiError], text: str) -> str:
    words = "; ".join(
        f"error {e.number}: {e.message}" if e.number is not None else e.message
        for e in errors
        if e.message or e.number is not None
    )
    return (words or text.strip() or "no reason given")[:_MAX_MESSAGE]


def error_for(action: str, status: int, errors: Sequence[ApiError], text: str) -> BackendError:
    """The error for a failed call (``action``: what the gateway was doing, for the message)."""
    numbers = {e.number for e in errors if e.number is not None}
    said = _said(errors, text)
    if status in (401, 403):
        return BackendUnavailableError(
            f"slurmrestd refused the gateway's credentials while {action} (HTTP {status}): "
            "check the token in the backend's token_env and its user"
        )
    if INVALID_JOB_ID in numbers:
        return SlurmJobNotFoundError(f"Slurm knows no such job ({said})")
    if numbers & REJECTING_ERRORS.keys():
        number = min(numbers & REJECTING_ERRORS.keys())
        return JobRejectedError(f"Slurm rejects the job: {REJECTING_ERRORS[number]} ({said})")
    if INVALID_PARTITION in numbers:
        return SlurmError(
            f"Slurm does not know the configured partition while {action} ({said}): "
            "fix the backend's partition"
        )
    if status == 429 or status >= 502:
        return BackendUnavailableError(f"slurmrestd is unavailable while {action} (HTTP {status})")
    return SlurmError(f"slurmrestd refused {action} (HTTP {status}: {said})")
