"""What a call reserves, and OpenAI's ``x-ratelimit-*`` headers that report it.

OpenAI's headers speak of requests and tokens per minute; a queue may limit tokens
per day or month instead, and then the tokens headers report the budget that
binds (the first of per-minute, per-day, per-month the queue limits).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from gateway.ledgers import Grant, Ledger, Refusal

__all__ = [
    "INFERENCE_RESOURCES",
    "amounts_for",
    "format_reset",
    "grant_headers",
    "refusal_headers",
    "refusal_message",
]

REQUESTS = "requests-per-minute"
TOKEN_RESOURCES = ("tokens-per-minute", "tokens-per-day", "tokens-per-month")
INFERENCE_RESOURCES = (REQUESTS, *TOKEN_RESOURCES)


def amounts_for(resources: Iterable[str], tokens: int) -> dict[str, int]:
    """One request and ``tokens`` tokens, for each resource the queue limits."""
    return {resource: 1 if resource == REQUESTS else tokens for resource in resources}


def grant_headers(ledger: Ledger, grant: Grant) -> dict[str, str]:
    headers: dict[str, str] = {}
    tokens = _token_resource(grant.amounts)
    for kind, resource in (("requests", REQUESTS), ("tokens", tokens)):
        if resource is None or resource not in grant.amounts:
            continue
        headers[f"x-ratelimit-limit-{kind}"] = str(
            ledger.limit(grant.queue, grant.flavor, resource)
        )
        headers[f"x-ratelimit-remaining-{kind}"] = str(grant.remaining.get(resource, 0))
        headers[f"x-ratelimit-reset-{kind}"] = format_reset(grant.reset_after.get(resource, 0.0))
    return headers


def refusal_headers(
    ledger: Ledger, queue: str, amounts: dict[str, int], refusal: Refusal
) -> dict[str, str]:
    """The refused resource's headers, the limits of the other, and ``Retry-After``."""
    headers = {"retry-after": str(max(1, math.ceil(refusal.retry_after)))}
    tokens = _token_resource(amounts)
    for kind, resource in (("requests", REQUESTS), ("tokens", tokens)):
        if resource is None or resource not in amounts:
            continue
        headers[f"x-ratelimit-limit-{kind}"] = str(ledger.limit(queue, refusal.flavor, resource))
        if resource == refusal.resource:
            headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, refusal.available))
            headers[f"x-ratelimit-reset-{kind}"] = format_reset(refusal.retry_after)
    return headers


def refusal_message(queue: str, refusal: Refusal) -> str:
    where = "cluster queue" if refusal.level == "ClusterQueue" else "cohort"
    return (
        f"Rate limit reached: {refusal.resource} of flavor {refusal.flavor!r} in {where} "
        f"{refusal.name!r} (queue {queue!r}): requested {refusal.requested}, "
        f"available {max(0, refusal.available)}. Retry after {math.ceil(refusal.retry_after)}s."
    )


def format_reset(seconds: float) -> str:
    """OpenAI's duration format: ``20ms``, ``1s``, ``6m0s``, ``1h2m3s``."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    whole = math.ceil(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def _token_resource(amounts: Iterable[str]) -> str | None:
    present = set(amounts)
    return next((resource for resource in TOKEN_RESOURCES if resource in present), None)
