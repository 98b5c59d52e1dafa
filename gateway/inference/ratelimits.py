"""What a call reserves, and OpenAI's ``x-ratelimit-*`` headers that report it.

OpenAI's headers speak of requests and tokens per minute; a queue may limit tokens
per day or month instead, and then the tokens headers report the budget that
binds (the first of per-minute, per-day, per-month the queue limits).

The headers describe the cluster queue the call is charged to, with what it may
borrow through its cohorts: ``x-ratelimit-limit-*`` is the most it could ever get
(nominal quota plus borrowable), ``x-ratelimit-remaining-*`` what it may take now
(borrowing included). ``x-ignara-ratelimit-scope`` says so (``cluster-queue <name>,
with borrowing``), ``x-ignara-ratelimit-tokens-resource`` names the resource the
tokens headers describe and ``x-ignara-ratelimit-nominal-*`` give the queue's own
nominal quota. ``x-ratelimit-reset-*`` is, after a grant, when everything reserved
so far has gone (the window, or the budget's period end); on a refusal, when this
call's amount will fit if nothing else is reserved meanwhile (``Retry-After``).

A call refused by its API key's own limit (:func:`key_refusal`) is told so apart:
code ``key_limit_exceeded``, level ``Key``, and headers that describe the key
(``x-ignara-ratelimit-scope: api-key <id>``), not its queue.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.inference.problems import InferenceError
from gateway.ledgers import Grant, KeyCharge, Ledger, Refusal

__all__ = [
    "INFERENCE_RESOURCES",
    "QueueQuota",
    "amounts_for",
    "format_reset",
    "key_refusal",
    "refusal_message",
]

REQUESTS = "requests-per-minute"
TOKEN_RESOURCES = ("tokens-per-minute", "tokens-per-day", "tokens-per-month")
INFERENCE_RESOURCES = (REQUESTS, *TOKEN_RESOURCES)
SCOPE_HEADER = "x-ignara-ratelimit-scope"


def amounts_for(resources: Iterable[str], tokens: int) -> dict[str, int]:
    """One request and ``tokens`` tokens, for each resource the queue limits."""
    return {resource: 1 if resource == REQUESTS else tokens for resource in resources}


@dataclass(frozen=True, slots=True)
class QueueQuota:
    """What a queue limits of a flavor's inference resources, and the headers that
    depend on the config alone (built once per config, see :meth:`of`)."""

    queue: str
    flavor: str
    resources: tuple[str, ...]
    limits: dict[str, int]  # per resource: the most the queue could ever get
    # (x-ratelimit kind, resource) for the requests and the tokens headers
    reported: tuple[tuple[str, str], ...]
    headers: dict[str, str]

    @classmethod
    def of(cls, ledger: Ledger, queue: str, flavor: str) -> QueueQuota:
        resources = tuple(r for r in INFERENCE_RESOURCES if ledger.covers(queue, flavor, r))
        limits = {r: ledger.limit(queue, flavor, r) for r in resources}
        tokens = next((r for r in TOKEN_RESOURCES if r in limits), None)
        reported = tuple(
            (kind, resource)
            for kind, resource in (("requests", REQUESTS), ("tokens", tokens))
            if resource is not None and resource in limits
        )
        headers = {SCOPE_HEADER: f"cluster-queue {queue}, with borrowing"}
        if tokens is not None:
            headers["x-ignara-ratelimit-tokens-resource"] = tokens
        for kind, resource in reported:
            headers[f"x-ratelimit-limit-{kind}"] = str(limits[resource])
            headers[f"x-ignara-ratelimit-nominal-{kind}"] = str(
                ledger.nominal(queue, flavor, resource)
            )
        return cls(queue, flavor, resources, limits, reported, headers)

    def grant_headers(self, grant: Grant, *, given_back: bool = False) -> dict[str, str]:
        """The headers of an answer to an admitted call; ``given_back``: its whole
        reservation went back (the call failed), so remaining counts it again."""
        headers = dict(self.headers)
        for kind, resource in self.reported:
            remaining = grant.remaining.get(resource, 0)
            if given_back:
                remaining = min(self.limits[resource], remaining + grant.amounts[resource])
            headers[f"x-ratelimit-remaining-{kind}"] = str(remaining)
            headers[f"x-ratelimit-reset-{kind}"] = format_reset(grant.reset_after[resource])
        return headers

    def refusal_headers(self, refusal: Refusal) -> dict[str, str]:
        headers = dict(self.headers)
        headers["retry-after"] = str(max(1, math.ceil(refusal.retry_after)))
        for kind, resource in self.reported:
            headers[f"x-ratelimit-remaining-{kind}"] = str(refusal.remaining.get(resource, 0))
            headers[f"x-ratelimit-reset-{kind}"] = format_reset(
                refusal.reset_after.get(resource, 0.0)
            )
        return headers


def refusal_message(queue: str, refusal: Refusal) -> str:
    where = "cluster queue" if refusal.level == "ClusterQueue" else "cohort"
    return (
        f"Rate limit reached: {refusal.resource} of flavor {refusal.flavor!r} in {where} "
        f"{refusal.name!r} (queue {queue!r}): requested {refusal.requested}, "
        f"available {max(0, refusal.available)}. Retry after {math.ceil(refusal.retry_after)}s."
    )


def key_refusal(queue: str, key: KeyCharge, refusal: Refusal) -> InferenceError:
    """The 429 of a call its API key's own limit refused (its queue had room, or would
    have it sooner): nothing was taken from the queue."""
    limit = key.limits[refusal.resource]
    available = max(0, refusal.available)
    wait = max(1, math.ceil(refusal.retry_after))
    message = (
        f"Rate limit reached for API key {key.key!r}: its own {refusal.resource} limit of "
        f"{limit} (below queue {queue!r}): requested {refusal.requested}, available "
        f"{available}. Retry after {wait}s."
    )
    return InferenceError(
        429,
        "tokens",
        message,
        code="key_limit_exceeded",
        headers={
            SCOPE_HEADER: f"api-key {key.key}",
            "x-ignara-ratelimit-tokens-resource": refusal.resource,
            "retry-after": str(wait),
            "x-ratelimit-limit-tokens": str(limit),
            "x-ratelimit-remaining-tokens": str(refusal.remaining.get(refusal.resource, 0)),
            "x-ratelimit-reset-tokens": format_reset(refusal.retry_after),
        },
        detail={
            "level": refusal.level,
            "name": key.key,
            "key": key.key,
            "queue": queue,
            "flavor": refusal.flavor,
            "resource": refusal.resource,
            "limit": limit,
            "requested": refusal.requested,
            "available": available,
            "retry_after_seconds": round(refusal.retry_after, 3),
        },
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
