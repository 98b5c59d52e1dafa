"""Quota configurations the ledger tests share (the ``ignara.yaml`` vocabulary)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from quota.config import parse_quota_config
from quota.ledger import period_end
from quota.model import QuotaConfig

POOL = "llama-pool"
TPM, RPM = "tokens-per-minute", "requests-per-minute"
TPD, TPMONTH = "tokens-per-day", "tokens-per-month"
T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC).timestamp()
MIDNIGHT = period_end(TPD, T0) - T0  # 12 hours after T0
MONTH_END = period_end(TPMONTH, T0) - T0  # 8.5 days after T0

Quotas = dict[str, int | dict[str, int]]


def queue(name: str, cohort: str | None, quotas: Quotas) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": name, "resource_groups": [_group(quotas)]}
    if cohort is not None:
        doc["cohort"] = cohort
    return doc


def cohort(name: str, parent: str | None = None, quotas: Quotas | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": name}
    if parent is not None:
        doc["parent"] = parent
    if quotas:
        doc["resource_groups"] = [_group(quotas)]
    return doc


def _group(quotas: Quotas) -> dict[str, Any]:
    entries = {r: q if isinstance(q, dict) else {"nominal": q} for r, q in quotas.items()}
    return {"resources": list(quotas), "flavors": [{"name": POOL, "quotas": entries}]}


def config(*, queues: list[dict[str, Any]], cohorts: list[dict[str, Any]]) -> QuotaConfig:
    return parse_quota_config({"flavors": [POOL], "cohorts": cohorts, "cluster_queues": queues})


def team(
    a_tpm: int = 1000, b_lending_limit: int | None = 200, *, with_y: bool = True
) -> QuotaConfig:
    """org: a borrows up to 500 past its 1000 tokens a minute; b lends 200 of its 1000.
    lab: x (100, borrows up to 50) and y (1000). solo and lonely have no cohort;
    lonely has no token quota at all."""
    b_tpm = {"nominal": 1000}
    if b_lending_limit is not None:
        b_tpm["lending_limit"] = b_lending_limit
    shared = {RPM: 10, TPD: 5000, TPMONTH: 100_000}
    queues = [
        queue("a", "org", {TPM: {"nominal": a_tpm, "borrowing_limit": 500}, **shared}),
        queue("b", "org", {TPM: b_tpm, **shared}),
        queue("x", "lab", {TPM: {"nominal": 100, "borrowing_limit": 50}}),
        queue("y", "lab", {TPM: 1000}),
        queue("solo", None, {TPM: 100, RPM: 5}),
        queue("lonely", None, {RPM: 5}),
    ]
    if not with_y:
        queues = [q for q in queues if q["name"] != "y"]
    return config(cohorts=[cohort("org"), cohort("lab")], queues=queues)


def deep() -> QuotaConfig:
    """company (500 tokens a minute of its own) <- org (may borrow at most 200) <- d (100);
    e sits right under company with nothing of its own."""
    return config(
        cohorts=[
            cohort("company", quotas={TPM: 500}),
            cohort("org", "company", {TPM: {"nominal": 0, "borrowing_limit": 200}}),
        ],
        queues=[queue("d", "org", {TPM: 100}), queue("e", "company", {TPM: 0})],
    )
