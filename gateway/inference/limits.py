"""Calls refused before they reach the quota, with a 400 that says what to change:
one larger than a call may be (``inference.max_call_tokens``), one that needs more
than its queue could ever be given (its nominal quota plus what it may borrow), and
one that needs more than its API key's own limit, which no retry or wait would ever
admit."""

from __future__ import annotations

from gateway.auth import Identity
from gateway.inference.calls import Call, CallKind
from gateway.inference.problems import InferenceError
from gateway.inference.ratelimits import REQUESTS, QueueQuota, amounts_for
from tenants.config_file import InferenceDoc

__all__ = ["check_call_size", "check_fits", "check_key_fits"]


def check_call_size(call: Call, settings: InferenceDoc) -> None:
    cap = settings.max_call_tokens
    if call.estimate > cap:
        raise InferenceError(
            400,
            "invalid_request_error",
            f"This call would reserve about {call.estimate} tokens ({_breakdown(call)}), "
            f"more than the {cap} one call may reserve here (inference.max_call_tokens). "
            f"{_advice(call, settings)}",
            code="call_too_large",
            detail={"estimate": call.estimate, "max_call_tokens": cap},
        )


def check_fits(call: Call, quota: QueueQuota, settings: InferenceDoc) -> None:
    for resource, amount in amounts_for(quota.resources, call.estimate).items():
        limit = quota.limits[resource]
        if amount <= limit:
            continue
        where = f"cluster queue {quota.queue!r} (flavor {quota.flavor!r})"
        if resource == REQUESTS:
            message = (
                f"{where} can never admit a request: its {resource} limit, nominal quota "
                f"plus what it may borrow, is {limit}. Use another queue (X-Ignara-Queue)."
            )
        else:
            message = (
                f"This call needs about {amount} tokens of {resource} ({_breakdown(call)}), "
                f"more than {where} could ever be given: its limit, nominal quota plus what "
                f"it may borrow, is {limit}. {_advice(call, settings)}"
            )
        raise InferenceError(
            400,
            "invalid_request_error",
            message,
            code="exceeds_quota_limit",
            headers=dict(quota.headers),
            detail={
                "queue": quota.queue,
                "flavor": quota.flavor,
                "resource": resource,
                "limit": limit,
                "estimate": amount,
            },
        )


def check_key_fits(call: Call, identity: Identity, settings: InferenceDoc) -> None:
    for resource, limit in identity.key_limits:
        if call.estimate <= limit:
            continue
        raise InferenceError(
            400,
            "invalid_request_error",
            f"This call needs about {call.estimate} tokens ({_breakdown(call)}), more than "
            f"API key {identity.key_id!r} may ever hold: its own {resource} limit is {limit}. "
            f"{_advice(call, settings)}",
            code="exceeds_key_limit",
            detail={
                "key": identity.key_id,
                "resource": resource,
                "limit": limit,
                "estimate": call.estimate,
            },
        )


def _breakdown(call: Call) -> str:
    if call.kind is CallKind.EMBEDDINGS:
        return "all of it input"
    return f"{call.prompt_tokens} estimated for the input, {call.completion_tokens} for the output"


def _advice(call: Call, settings: InferenceDoc) -> str:
    if call.kind is CallKind.EMBEDDINGS:
        return "Send less input per call."
    if call.max_tokens_given:
        return "Lower max_tokens or n, or shorten the input."
    return (
        f"Set max_tokens (unset, the default of {settings.default_max_tokens} is reserved "
        "for each completion), lower n, or shorten the input."
    )
