"""One mapping from evaluation outcomes to decisions, for every engine: whatever is
not a well-formed answer in time is a deny that says why."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from gateway.policy.decision import Decision, FailureKind
from gateway.policy.errors import EvaluationError, UndefinedDocumentError

__all__ = ["decide_fail_closed"]

_log = logging.getLogger(__name__)


async def decide_fail_closed(
    ref: str, evaluation: Awaitable[object], timeout: float, engine: str
) -> Decision:
    try:
        async with asyncio.timeout(timeout):
            value = await evaluation
    except TimeoutError:
        _log.warning("%s: policy decision %s timed out after %ss", engine, ref, timeout)
        return Decision.fail_closed(
            FailureKind.TIMEOUT, f"policy decision {ref} took longer than {timeout:g}s"
        )
    except UndefinedDocumentError:
        return Decision.fail_closed(FailureKind.UNDEFINED, f"policy decision {ref} is undefined")
    except EvaluationError as exc:
        _log.warning("%s: policy decision %s failed: %s", engine, ref, exc)
        if exc.code == "unreachable":
            failure, verb = FailureKind.UNAVAILABLE, "could not be asked"
        else:
            failure, verb = FailureKind.ERROR, "failed to evaluate"
        return Decision.fail_closed(failure, f"policy decision {ref} {verb} ({exc.code})")
    return Decision.from_result(value, ref)
