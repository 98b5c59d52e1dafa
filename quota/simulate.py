"""Play an admission scenario through the engine: what ``ignara simulate`` runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, timedelta
from decimal import Decimal
from typing import Any

from quota.budgets import format_hours, is_budget
from quota.engine import QuotaEngine
from quota.errors import ScenarioError, WorkloadError
from quota.scenario import (
    Advance,
    Delete,
    Expect,
    ExpectedBudgets,
    ExpectedPodSet,
    Finish,
    InitialWorkload,
    Scenario,
    Schedule,
    Submit,
)

__all__ = ["SimulationResult", "play", "snapshot"]


@dataclass
class SimulationResult:
    name: str
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        return {"snapshots": self.snapshots, "ok": self.ok}

    def describe(self) -> str:
        lines = [f"scenario: {self.name or '(unnamed)'}"]
        for i, snap in enumerate(self.snapshots, 1):
            admitted = ", ".join(sorted(snap["admitted"])) or "-"
            pending = ", ".join(snap["pending"]) or "-"
            preempted = ", ".join(snap["preempted"]) or "-"
            lines.append(
                f"expect {i}: admitted {admitted}; pending {pending}; preempted {preempted}"
            )
        lines.append("ok" if self.ok else f"{len(self.failures)} expectation(s) failed")
        return "\n".join(lines)


class _StepClock:
    """Logical time: every admission in the simulation is newer than anything declared."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1
        return self.now


def play(scenario: Scenario) -> SimulationResult:
    """Play every step; raise :class:`ScenarioError` for a step that cannot be played."""
    declared = list(scenario.workloads)
    for step in scenario.steps:
        if isinstance(step, Submit):
            declared.extend(step.workloads)
    start = max((_latest(w) for w in declared), default=0.0)
    engine = QuotaEngine(scenario.config, clock=_StepClock(start), now=scenario.clock)
    result = SimulationResult(scenario.name)
    _add(engine, scenario.workloads, "workloads")
    preempted: set[str] = set()
    for index, step in enumerate(scenario.steps):
        where = f"steps[{index}]"
        if isinstance(step, Schedule):
            for cycle in engine.schedule(max_cycles=step.cycles):
                preempted.update(cycle.preempted)
        elif isinstance(step, Expect):
            snap = snapshot(engine, preempted)
            result.snapshots.append(snap)
            result.failures.extend(f"{where} (expect): {m}" for m in _compare(step, snap))
            preempted = set()
        elif isinstance(step, Submit):
            _add(engine, step.workloads, f"{where}.submit")
        elif isinstance(step, Finish):
            _each(engine.finish, step.names, f"{where}.finish")
        elif isinstance(step, Delete):
            _each(engine.delete, step.names, f"{where}.delete")
        elif isinstance(step, Advance):
            engine.advance_to(engine.now + timedelta(seconds=float(step.seconds)))
    return result


def _latest(initial: InitialWorkload) -> float:
    return max(initial.workload.created, initial.admitted_at or 0.0)


def _add(engine: QuotaEngine, workloads: tuple[InitialWorkload, ...], where: str) -> None:
    for i, initial in enumerate(workloads):
        try:
            if initial.admission is None:
                engine.add(initial.workload)
            else:
                at = initial.admitted_at if initial.admitted_at is not None else None
                engine.add_admitted(initial.workload, initial.admission, admitted_at=at)
        except WorkloadError as err:
            raise ScenarioError(f"{where}[{i}]: {err}") from None


def _each(action: Any, names: tuple[str, ...], where: str) -> None:
    for i, name in enumerate(names):
        try:
            action(name)
        except WorkloadError as err:
            raise ScenarioError(f"{where}[{i}]: {err}") from None


def snapshot(engine: QuotaEngine, preempted: set[str]) -> dict[str, Any]:
    """The full admission state in the spec's JSON shape."""
    admitted = {}
    for name in sorted(engine.admitted):
        record = engine.admitted[name]
        admitted[name] = {
            "cluster_queue": record.admission.cluster_queue,
            "pod_sets": {
                p.name: {
                    "count": p.count,
                    # A budget takes its metered resource's flavor; not asked for, not shown.
                    "flavors": {r: f for r, f in sorted(p.flavors.items()) if not is_budget(r)},
                }
                for p in record.admission.pod_sets
            },
        }
    budgets: dict[str, dict[str, dict[str, dict[str, str]]]] = {}
    for level, amounts in sorted(engine.budgets().items()):
        for fr, (charged, committed) in sorted(amounts.items()):
            budgets.setdefault(level, {}).setdefault(fr.flavor, {})[fr.resource] = {
                "charged": format_hours(charged),
                "committed": format_hours(committed),
            }
    return {
        "admitted": admitted,
        "pending": sorted(w.name for w in engine.pending()),
        "preempted": sorted(preempted),
        "budgets": budgets,
        "clock": engine.now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _compare(expect: Expect, snap: dict[str, Any]) -> list[str]:
    problems = []
    if expect.admitted is not None:
        problems.extend(_compare_admitted(expect.admitted, snap["admitted"]))
    if expect.budgets is not None:
        problems.extend(_compare_budgets(expect.budgets, snap["budgets"]))
    for key in ("pending", "preempted"):
        want = getattr(expect, key)
        if want is None:
            continue
        got = set(snap[key])
        if want != got:
            problems.append(
                f"{key}: want {sorted(want)}, got {sorted(got)}"
                f" (missing {sorted(want - got)}, unexpected {sorted(got - want)})"
            )
    return problems


def _compare_admitted(want: dict[str, dict[str, ExpectedPodSet]], got: dict[str, Any]) -> list[str]:
    problems = []
    missing, unexpected = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    if missing or unexpected:
        problems.append(f"admitted: missing {missing}, unexpected {unexpected}")
    for name in sorted(set(want) & set(got)):
        pod_sets = got[name]["pod_sets"]
        for pod_set, expected in want[name].items():
            actual = pod_sets.get(pod_set)
            if actual is None:
                problems.append(f"admitted {name}: no pod set {pod_set!r}")
                continue
            if expected.count is not None and expected.count != actual["count"]:
                problems.append(
                    f"admitted {name}.{pod_set}: count want {expected.count}, got {actual['count']}"
                )
            for resource, flavor in (expected.flavors or {}).items():
                if actual["flavors"].get(resource) != flavor:
                    problems.append(
                        f"admitted {name}.{pod_set}: flavor of {resource} want {flavor},"
                        f" got {actual['flavors'].get(resource)}"
                    )
    return problems


def _compare_budgets(want: ExpectedBudgets, got: dict[str, Any]) -> list[str]:
    problems = []
    for level, flavors in want.items():
        for flavor, resources in flavors.items():
            for resource, amounts in resources.items():
                actual = got.get(level, {}).get(flavor, {}).get(resource)
                where = f"budgets {level}.{flavor}.{resource}"
                if actual is None:
                    problems.append(f"{where}: no such budget (levels: {sorted(got)})")
                    continue
                for key, amount in amounts.items():
                    if Decimal(actual[key]) != amount:
                        problems.append(f"{where}.{key}: want {amount}, got {actual[key]}")
    return problems
