"""What a fault scenario's calls and submissions add up to, and its row of the README's table.

Phases are by a call's start: ``before`` the fault, ``during`` it (from its injection
until the fault is removed: the server is back, or thawed), ``after``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.fault_load import Call, Submission
from bench.fault_stack import TIGHT_BUDGET, TIGHT_RATE

__all__ = [
    "Fault",
    "JobRun",
    "WorkloadRow",
    "inference_summary",
    "markdown",
    "token_summary",
    "workload_summary",
]

RATE_WINDOW = 60.0
FINAL_STATES = ("succeeded", "failed", "cancelled")
# Errors still seen this close to the end of the load: the service has not recovered.
NOT_RECOVERED_MARGIN = 1.0


@dataclass
class Fault:
    scenario: str
    what: str = ""
    start: float = math.nan  # injected (the kill, freeze or stop begins)
    applied: float = math.nan  # the injection done (e.g. PostgreSQL stopped)
    removing: float = math.nan  # its removal begins (a restart, SIGCONT)
    end: float = math.nan  # removed: the server answers again (or is thawed)
    stop: float = math.nan  # the load stopped
    removal_error: str | None = None  # the server could not be brought back

    def phase(self, t: float) -> str:
        if t < self.start:
            return "before"
        return "during" if t < self.end else "after"

    def to_json(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "injected_at_s": round(self.start, 3),
            "applied_at_s": round(self.applied, 3),
            "removal_began_at_s": round(self.removing, 3),
            "removed_at_s": round(self.end, 3),
            "load_stopped_at_s": round(self.stop, 3),
            "removal_error": self.removal_error,
        }


@dataclass(frozen=True)
class WorkloadRow:
    id: str
    key: str | None
    state: str
    attempt: int
    reason: str | None


@dataclass(frozen=True)
class JobRun:
    """One job directory of the local backend (``<workload>-<attempt>``)."""

    workload_id: str
    attempt: int
    output_lines: int


def _percentile(ordered: Sequence[float], p: float) -> float | None:
    if not ordered:
        return None
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _ms(values: Iterable[float]) -> dict[str, Any]:
    ordered = sorted(values)
    out: dict[str, Any] = {"n": len(ordered)}
    for name, p in (("p50_ms", 50), ("p99_ms", 99), ("max_ms", 100)):
        value = _percentile(ordered, p)
        out[name] = None if value is None else round(value * 1000, 1)
    return out


def _by_phase(fault: Fault, items: Iterable[tuple[float, str]]) -> dict[str, dict[str, int]]:
    out: dict[str, Counter[str]] = {p: Counter() for p in ("before", "during", "after")}
    for start, outcome in items:
        out[fault.phase(start)][outcome] += 1
    return {phase: dict(counts.most_common()) for phase, counts in out.items()}


def _is_error(outcome: str) -> bool:
    return not (outcome == "200" or outcome.startswith("429"))


def inference_summary(fault: Fault, calls: Sequence[Call]) -> dict[str, Any]:
    """Answers by phase and outcome (``roomy``: availability; ``tight``: its quota is
    spent, so 429s are right), error latencies, and recovery of the roomy calls."""
    roomy = [c for c in calls if c.tenant == "roomy"]
    errors: dict[str, list[float]] = {}
    examples: dict[str, str] = {}
    for call in calls:
        if _is_error(call.outcome):
            errors.setdefault(call.outcome, []).append(call.end - call.start)
            examples.setdefault(call.outcome, call.detail)
    ok_latency: dict[str, list[float]] = {"before": [], "during": [], "after": []}
    for call in roomy:
        if call.ok:
            ok_latency[fault.phase(call.start)].append(call.end - call.start)
    first_ok = min((c.end for c in roomy if c.ok and c.start >= fault.start), default=None)
    back = min((c.end for c in roomy if c.ok and c.start >= fault.end), default=None)
    failed_ends = [c.end for c in roomy if not c.ok and c.end >= fault.start]
    last_failure = max(failed_ends, default=None)
    recovered: float | None = 0.0
    if last_failure is not None:
        recovered = max(0.0, last_failure - fault.end)
        if last_failure > fault.stop - NOT_RECOVERED_MARGIN:
            recovered = None
    seconds = {
        "before": fault.start,
        "during": fault.end - fault.start,
        "after": fault.stop - fault.end,
    }
    ok_per_s = {p: round(len(ok_latency[p]) / s, 1) for p, s in seconds.items() if s > 0}
    return {
        "calls": len(calls),
        "roomy": _by_phase(fault, ((c.start, c.outcome) for c in roomy)),
        "tight": _by_phase(fault, ((c.start, c.outcome) for c in calls if c.tenant == "tight")),
        "roomy_ok_per_s": ok_per_s,
        "roomy_ok_latency": {phase: _ms(v) for phase, v in ok_latency.items()},
        "error_latency": {k: _ms(v) for k, v in sorted(errors.items())},
        "error_examples": examples,
        "first_success_after_fault_s": _since(first_ok, fault.start),
        "first_success_after_removal_s": _since(back, fault.end),
        "failed_calls_after_fault": len(failed_ends),
        "recovered_after_removal_s": None if recovered is None else round(recovered, 3),
    }


def _since(t: float | None, origin: float) -> float | None:
    return None if t is None else round(t - origin, 3)


def _max_in_window(calls: Sequence[Call], window: float) -> int:
    """The most tokens granted to calls started within any ``window`` seconds."""
    ordered = sorted((c.start, c.tokens) for c in calls)
    best = total = 0
    left = 0
    for start, tokens in ordered:
        total += tokens
        while ordered[left][0] <= start - window:
            total -= ordered[left][1]
            left += 1
        best = max(best, total)
    return best


def token_summary(
    fault: Fault,
    calls: Sequence[Call],
    charged: Mapping[str, int | str],
    recorded: Mapping[str, int | str],
) -> dict[str, Any]:
    """Tokens granted (the usage the upstream reported, summed over the 200s) against the
    tight queue's quota, and against what the ledger charged and the usage records hold.

    ``charged``: per tenant, what the ledger's day budget holds at the end (every charge
    of the run, nothing expires). ``recorded``: the usage API's total tokens per tenant.
    Either may be a string saying why it could not be read."""
    out: dict[str, Any] = {}
    for tenant in ("roomy", "tight"):
        ok = [c for c in calls if c.tenant == tenant and c.ok]
        granted = sum(c.tokens for c in ok)
        phases = Counter[str]()
        for call in ok:
            phases[fault.phase(call.start)] += call.tokens
        entry: dict[str, Any] = {
            "granted": granted,
            "granted_by_phase": {p: phases[p] for p in ("before", "during", "after")},
            "ledger_day_charged": charged.get(tenant),
            "usage_records": recorded.get(tenant),
        }
        for key, value in (("charged", charged.get(tenant)), ("recorded", recorded.get(tenant))):
            entry[f"{key}_minus_granted"] = value - granted if isinstance(value, int) else None
        if tenant == "tight":
            window = _max_in_window(ok, RATE_WINDOW)
            entry |= {
                "rate_quota_per_minute": TIGHT_RATE,
                "day_budget": TIGHT_BUDGET,
                "granted_max_in_60s": window,
                "over_rate_quota": window > TIGHT_RATE,
                "over_day_budget": granted > TIGHT_BUDGET,
            }
        out[tenant] = entry
    return out


def workload_summary(
    fault: Fault,
    submissions: Sequence[Submission],
    rows: Sequence[WorkloadRow],
    runs: Sequence[JobRun],
) -> dict[str, Any]:
    """Accepted versus stored (lost), stored twice, run twice, and not finished."""
    accepted = {s.workload_id for s in submissions if s.workload_id is not None}
    stored = {r.id: r for r in rows}
    per_key = Counter(r.key for r in rows)
    runs_of: dict[str, list[JobRun]] = {}
    for run in runs:
        runs_of.setdefault(run.workload_id, []).append(run)
    ran_twice = sum(
        1
        for wid, row in stored.items()
        if row.attempt > 1
        or len(runs_of.get(wid, [])) > 1
        or sum(r.output_lines for r in runs_of.get(wid, [])) > 1
    )
    attempts = [a for s in submissions for a in s.attempts]
    failed_attempts = [a for a in attempts if not a.outcome.startswith(("200", "201"))]
    first_accept_after = min(
        (
            s.attempts[-1].end
            for s in submissions
            if s.accepted and s.attempts[-1].start >= fault.start
        ),
        default=None,
    )
    failures = Counter(r.reason or "" for r in rows if r.state == "failed")
    return {
        "submitted": len(submissions),
        "accepted": len(accepted),
        "refused": dict(Counter(s.refused for s in submissions if s.refused).most_common()),
        "gave_up": sum(1 for s in submissions if not s.accepted and not s.refused),
        "lost": len(accepted - stored.keys()),
        "stored_twice": sum(n - 1 for key, n in per_key.items() if key is not None and n > 1),
        "ran_twice": ran_twice,
        "unfinished": sum(
            1 for wid in accepted & stored.keys() if stored[wid].state not in FINAL_STATES
        ),
        "never_ran": sum(1 for wid in accepted & stored.keys() if wid not in runs_of),
        "states": dict(Counter(r.state for r in rows).most_common()),
        "failed_reasons": dict(failures.most_common(3)),
        "submit_attempts": _by_phase(fault, ((a.start, a.outcome) for a in attempts)),
        "submit_error_latency": _ms(a.end - a.start for a in failed_attempts),
        "time_to_accept": _ms(s.attempts[-1].end - s.start for s in submissions if s.accepted),
        "first_accept_after_fault_s": _since(first_accept_after, fault.start),
    }


# -- the README's table -------------------------------------------------------------------

COLUMNS = (
    "scenario",
    "fault lasted s",
    "roomy calls during the fault",
    "error p50 / p99 ms",
    "roomy 200s during: p99 ms",
    "first roomy 200 after injection s",
    "roomy errors end, s after removal",
    f"tight tokens granted: most in 60 s / run (quota {TIGHT_RATE:,} a minute, "
    f"{TIGHT_BUDGET:,} a day)",
    "roomy tokens: ledger - granted / records - granted",
    "workloads accepted / lost / twice / unfinished",
    "submit errors",
)


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k}: {v:,}" for k, v in counts.items()) or "none"


def _number(value: Any, never: str = "never") -> str:
    if value is None:
        return never
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:+,}" if value else "0"
    return str(value)


def _row(s: Mapping[str, Any]) -> list[str]:
    if "error" in s:  # the scenario could not run
        return [s["scenario"], f"failed: {s['error'].splitlines()[0]}"] + [""] * (len(COLUMNS) - 2)
    fault, inference = s["fault"], s["inference"]
    tokens, workloads = s["tokens"], s["workloads"]
    latency = [
        f"{k}: {v['p50_ms']:,} / {v['p99_ms']:,}" for k, v in inference["error_latency"].items()
    ]
    tight, roomy = tokens["tight"], tokens["roomy"]
    submit_errors = Counter[str]()
    for phase in workloads["submit_attempts"].values():
        for outcome, n in phase.items():
            if not outcome.startswith(("200", "201")):
                submit_errors[outcome] += n
    during_ok = inference["roomy_ok_latency"]["during"]["p99_ms"]
    twice = workloads["stored_twice"] + workloads["ran_twice"]
    return [
        s["scenario"],
        "not removed"
        if fault.get("removal_error")
        else f"{fault['removed_at_s'] - fault['injected_at_s']:.1f}",
        _counts(inference["roomy"]["during"]),
        "; ".join(latency) or "no errors",
        "none" if during_ok is None else f"{during_ok:,}",
        _number(inference["first_success_after_fault_s"]),
        _number(inference["recovered_after_removal_s"], "not by the end"),
        f"{tight['granted_max_in_60s']:,} / {tight['granted']:,}",
        f"{_number(roomy['charged_minus_granted'])} / {_number(roomy['recorded_minus_granted'])}",
        f"{workloads['accepted']} / {workloads['lost']} / {twice} / {workloads['unfinished']}",
        _counts(dict(submit_errors.most_common())),
    ]


def markdown(scenarios: Sequence[Mapping[str, Any]]) -> str:
    """The table: a header and one row per scenario."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_row(s)) + " |" for s in scenarios]
    return "\n".join(lines)
