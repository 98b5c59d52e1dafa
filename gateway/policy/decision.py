"""The outcome of a policy decision, and how a raw result becomes one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["ADMISSION", "AUTHZ", "DECISIONS", "INFERENCE", "Decision", "FailureKind"]

# The decisions the gateway asks for (policies/rego/README.md).
AUTHZ = "ignara.authz.decision"
ADMISSION = "ignara.admission.decision"
INFERENCE = "ignara.inference.decision"
DECISIONS = (AUTHZ, ADMISSION, INFERENCE)


class FailureKind(StrEnum):
    """Why a decision was denied without the policy having decided."""

    NOT_LOADED = "not_loaded"
    INVALID_REQUEST = "invalid_request"
    UNDEFINED = "undefined"
    ERROR = "error"
    MALFORMED = "malformed"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class Decision:
    """Allow or deny, with human reasons.

    `reasons` are shown to the caller; a deny always has at least one.
    `failure` is set when the engine, not the policy, denied (fail closed), so
    callers can count such denials; it is None for a policy's own answer.
    """

    allow: bool
    reasons: tuple[str, ...] = ()
    failure: FailureKind | None = None

    @classmethod
    def deny(cls, reason: str, failure: FailureKind | None = None) -> Decision:
        return cls(allow=False, reasons=(reason,), failure=failure)

    @classmethod
    def fail_closed(cls, failure: FailureKind, why: str) -> Decision:
        """A deny because no valid decision was obtained; `why` says what happened."""
        return cls.deny(f"{why}; denying by default", failure)

    @classmethod
    def from_result(cls, value: object, ref: str) -> Decision:
        """Validate a decision document ``{"allow": bool, "reasons": [str, ...]}``.

        Anything else is a deny saying what was wrong with it. Extra keys are
        ignored. A policy's deny without reasons gets a generic one.
        """
        problem = _problem(value)
        if problem is not None:
            return cls.fail_closed(
                FailureKind.MALFORMED, f"policy decision {ref} is malformed ({problem})"
            )
        assert isinstance(value, Mapping)  # checked by _problem
        allow: bool = value["allow"]
        reasons = tuple(value["reasons"])
        if not allow and not reasons:
            reasons = (f"policy decision {ref} denied without giving a reason",)
        return cls(allow=allow, reasons=reasons)


def _problem(value: object) -> str | None:
    if not isinstance(value, Mapping):
        return f"expected an object, got {_json_type(value)}"
    if not isinstance(value.get("allow"), bool):
        return f'"allow" must be a boolean, got {_json_type(value.get("allow"))}'
    reasons = value.get("reasons")
    if isinstance(reasons, str) or not isinstance(reasons, Sequence):
        return f'"reasons" must be an array of strings, got {_json_type(reasons)}'
    if not all(isinstance(reason, str) for reason in reasons):
        return '"reasons" must be an array of strings'
    return None


def _json_type(value: object) -> str:
    match value:
        case None:
            return "null"
        case bool():
            return "a boolean"
        case int() | float():
            return "a number"
        case str():
            return "a string"
        case Mapping():
            return "an object"
        case Sequence():
            return "an array"
    return type(value).__name__
