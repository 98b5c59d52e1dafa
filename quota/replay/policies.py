"""The three quota policies a replay compares, made from the teams' sizes.

A team's nominal quota is its size in GPUs (nodes x 8); ``--capacity-scale``
shrinks every queue alike to create contention. The policies differ only in how
queues share:

- ``static``: no cohort; each team runs on its own quota (how Philly ran).
- ``cohort``: every team in one cohort; a queue borrows what others leave idle,
  and an owner reclaims its nominal quota by preempting borrowers (``Any``:
  the trace has no priorities, so ``LowerPriority`` would never reclaim).
- ``cohort-fair``: the same, with fair sharing deciding admission order and
  which borrower gives way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from quota.config import parse_quota_config
from quota.errors import QuotaError
from quota.model import FlavorQuotas, QuotaConfig, ResourceGroup, ResourceQuota

__all__ = [
    "COHORT",
    "FLAVOR",
    "GPU",
    "GPUS_PER_NODE",
    "POLICIES",
    "PolicyError",
    "check_policy",
    "nominal_gpus",
    "policy_of",
    "quota_document",
    "scale_config",
]

GPU = "nvidia.com/gpu"
FLAVOR = "gpu"
COHORT = "cluster"
GPUS_PER_NODE = 8
POLICIES = ("static", "cohort", "cohort-fair")
MILLI = 1000


class PolicyError(QuotaError):
    """A quota file that does not fit the policy asked for, or a bad scale."""


def quota_document(sizes: Mapping[str, int], policy: str, scale: float = 1.0) -> dict[str, Any]:
    """The quota configuration of ``policy`` (YAML-ready): one cluster queue per team,
    named as the trace names the team, nominal = nodes x 8 GPUs x ``scale``."""
    if policy not in POLICIES:
        raise PolicyError(f"unknown policy {policy!r} (one of {', '.join(POLICIES)})")
    _check_scale(scale)
    shared = policy != "static"
    queues = []
    for team, nodes in sizes.items():
        queue: dict[str, Any] = {
            "name": team,
            "resource_groups": [
                {
                    "resources": [GPU],
                    "flavors": [
                        {
                            "name": FLAVOR,
                            "quotas": {GPU: {"nominal": _whole(nodes * GPUS_PER_NODE * scale)}},
                        }
                    ],
                }
            ],
        }
        if shared:
            queue["cohort"] = COHORT
            queue["preemption"] = {"reclaim_within_cohort": "Any"}
        queues.append(queue)
    document: dict[str, Any] = {"flavors": [FLAVOR]}
    if shared:
        document["cohorts"] = [{"name": COHORT}]
    document["cluster_queues"] = queues
    if policy == "cohort-fair":
        document["fair_sharing"] = True
    # Built to the same rules as any quota file: a generated file is a valid one.
    parse_quota_config(document)
    return document


def policy_of(config: QuotaConfig) -> str:
    """Which of the three policies a configuration is."""
    if not any(queue.cohort for queue in config.cluster_queues):
        return "static"
    return "cohort-fair" if config.fair_sharing else "cohort"


def check_policy(config: QuotaConfig, policy: str) -> None:
    """Refuse a quota file that is not the policy the run is labelled with: a table
    that says ``static`` over a file with a cohort would compare the wrong thing."""
    if policy not in POLICIES:
        raise PolicyError(f"unknown policy {policy!r} (one of {', '.join(POLICIES)})")
    actual = policy_of(config)
    if actual != policy:
        raise PolicyError(
            f"the quota file is a {actual!r} configuration, not {policy!r}"
            " (static: no cohort; cohort: a cohort, fair_sharing off; cohort-fair: on)"
        )


def scale_config(config: QuotaConfig, scale: float) -> QuotaConfig:
    """Every GPU quota (nominal and limits) times ``scale``, in whole GPUs."""
    _check_scale(scale)
    if scale == 1.0:
        return config
    factor = Fraction(scale)

    def group(g: ResourceGroup) -> ResourceGroup:
        return dataclasses.replace(
            g,
            flavors=tuple(
                FlavorQuotas(
                    f.name,
                    {r: _scaled(q, factor) if r == GPU else q for r, q in f.quotas.items()},
                )
                for f in g.flavors
            ),
        )

    return dataclasses.replace(
        config,
        cohorts=tuple(
            dataclasses.replace(c, resource_groups=tuple(map(group, c.resource_groups)))
            for c in config.cohorts
        ),
        cluster_queues=tuple(
            dataclasses.replace(q, resource_groups=tuple(map(group, q.resource_groups)))
            for q in config.cluster_queues
        ),
    )


def nominal_gpus(config: QuotaConfig) -> dict[str, int]:
    """Each cluster queue's nominal GPUs over all its flavors."""
    return {
        queue.name: sum(
            flavor.quotas[GPU].nominal // MILLI
            for group in queue.resource_groups
            for flavor in group.flavors
            if GPU in flavor.quotas
        )
        for queue in config.cluster_queues
    }


def _scaled(quota: ResourceQuota, factor: Fraction) -> ResourceQuota:
    def whole(amount: int | None) -> int | None:
        return None if amount is None else round(amount * factor / MILLI) * MILLI

    return ResourceQuota(
        nominal=round(quota.nominal * factor / MILLI) * MILLI,
        borrowing_limit=whole(quota.borrowing_limit),
        lending_limit=whole(quota.lending_limit),
    )


def _whole(gpus: float) -> int:
    return round(gpus)


def _check_scale(scale: float) -> None:
    if not 0 < scale <= 1000:  # also refuses NaN
        raise PolicyError(f"capacity scale {scale} must be above 0 (and at most 1000)")
