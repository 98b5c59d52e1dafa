"""Admission scenario files (``shared/spec/admission-scenarios.md``): load and check.

:func:`load_scenario` turns a YAML file into a :class:`Scenario` or raises a
:class:`~quota.errors.ScenarioError` whose one-line message names the bad field.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import msgspec
import yaml

from quota.budgets import is_budget
from quota.config import (
    ClusterQueueDoc,
    CohortDoc,
    Duration,
    QuotaDocument,
    decode,
    duration_at,
    quantity_at,
    to_quota_config,
)
from quota.errors import ScenarioError
from quota.model import Admission, PodSet, PodSetAssignment, QuotaConfig, Workload
from quota.periods import BudgetPeriod

__all__ = [
    "Advance",
    "Delete",
    "Expect",
    "ExpectedPodSet",
    "Finish",
    "InitialWorkload",
    "Scenario",
    "Schedule",
    "Step",
    "Submit",
    "load_scenario",
    "parse_scenario",
]

Quantity = str | int | float
UNSET = msgspec.UNSET
MAX_FILE_BYTES = 16 * 1024 * 1024


class _Doc(msgspec.Struct, forbid_unknown_fields=True):
    pass


class PodSetDoc(_Doc):
    name: str
    count: int
    requests: dict[str, Quantity] = {}
    min_count: int | None = None


class AdmittedPodSetDoc(_Doc):
    count: int
    flavors: dict[str, str] = {}


class WorkloadDoc(_Doc):
    name: str
    cluster_queue: str
    pod_sets: list[PodSetDoc]
    priority: int = 0
    created: int | float = 0
    admitted: dict[str, AdmittedPodSetDoc] | None = None
    admitted_at: int | float | None = None
    max_runtime: Duration | None = None


class ScheduleDoc(_Doc):
    cycles: int | None = None


class ExpectPodSetDoc(_Doc):
    count: int | None = None
    flavors: dict[str, str] | None = None


class ExpectBudgetDoc(_Doc):
    charged: Quantity | None = None
    committed: Quantity | None = None


class ExpectDoc(_Doc):
    admitted: dict[str, dict[str, ExpectPodSetDoc]] | msgspec.UnsetType = UNSET
    pending: list[str] | msgspec.UnsetType = UNSET
    preempted: list[str] | msgspec.UnsetType = UNSET
    # level -> flavor -> budget resource -> amounts in resource-hours
    budgets: dict[str, dict[str, dict[str, ExpectBudgetDoc]]] | msgspec.UnsetType = UNSET


class StepDoc(_Doc):
    schedule: ScheduleDoc | msgspec.UnsetType | None = UNSET
    expect: ExpectDoc | msgspec.UnsetType = UNSET
    submit: list[WorkloadDoc] | msgspec.UnsetType = UNSET
    finish: list[str] | msgspec.UnsetType = UNSET
    delete: list[str] | msgspec.UnsetType = UNSET
    advance: Duration | msgspec.UnsetType = UNSET


class ScenarioDoc(_Doc):
    name: str = ""
    source: str | None = None
    tags: list[str] = []
    flavors: list[str] = []
    cohorts: list[CohortDoc] = []
    cluster_queues: list[ClusterQueueDoc] = []
    fair_sharing: bool = False
    clock: str | None = None
    budget_period: BudgetPeriod = BudgetPeriod.MONTH
    workloads: list[WorkloadDoc] = []
    steps: list[StepDoc] = []


@dataclass(frozen=True)
class InitialWorkload:
    """A workload as a scenario declares it, possibly already holding quota."""

    workload: Workload
    admission: Admission | None = None
    admitted_at: float | None = None


@dataclass(frozen=True)
class Schedule:
    cycles: int | None  # None: until a cycle changes nothing


@dataclass(frozen=True)
class ExpectedPodSet:
    count: int | None
    flavors: dict[str, str] | None


# level -> flavor -> budget resource -> {"charged" | "committed": hours}
ExpectedBudgets = dict[str, dict[str, dict[str, dict[str, Decimal]]]]


@dataclass(frozen=True)
class Expect:
    admitted: dict[str, dict[str, ExpectedPodSet]] | None
    pending: frozenset[str] | None
    preempted: frozenset[str] | None
    budgets: ExpectedBudgets | None = None


@dataclass(frozen=True)
class Submit:
    workloads: tuple[InitialWorkload, ...]


@dataclass(frozen=True)
class Finish:
    names: tuple[str, ...]


@dataclass(frozen=True)
class Delete:
    names: tuple[str, ...]


@dataclass(frozen=True)
class Advance:
    seconds: Fraction


Step = Schedule | Expect | Submit | Finish | Delete | Advance

DEFAULT_CLOCK = datetime(2026, 11, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Scenario:
    name: str
    config: QuotaConfig
    workloads: tuple[InitialWorkload, ...]
    steps: tuple[Step, ...]
    clock: datetime = DEFAULT_CLOCK  # the budget clock at the start


def load_scenario(path: str | Path) -> Scenario:
    """Read and check a scenario file."""
    file = Path(path)
    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            raise ScenarioError(f"file is larger than {MAX_FILE_BYTES // 2**20} MiB")
        text = file.read_text(encoding="utf-8")
    except OSError as err:
        raise ScenarioError(f"cannot read the file: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise ScenarioError("the file is not UTF-8 text") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or "malformed YAML"
        raise ScenarioError(f"not valid YAML{where}: {problem}") from None
    return parse_scenario(data)


def parse_scenario(data: Any) -> Scenario:
    """Check already-parsed YAML data and build a :class:`Scenario`."""
    if not isinstance(data, dict):
        raise ScenarioError(
            "(top level): a scenario is a mapping with flavors, cluster_queues, ..."
        )
    doc = decode(data, ScenarioDoc, ScenarioError)
    config = to_quota_config(
        QuotaDocument(
            flavors=doc.flavors,
            cohorts=doc.cohorts,
            cluster_queues=doc.cluster_queues,
            fair_sharing=doc.fair_sharing,
            budget_period=doc.budget_period,
        ),
        ScenarioError,
    )
    checker = _Checker(config)
    workloads = tuple(checker.workload(f"workloads[{i}]", w) for i, w in enumerate(doc.workloads))
    steps = tuple(checker.step(f"steps[{i}]", s) for i, s in enumerate(doc.steps))
    clock = DEFAULT_CLOCK if doc.clock is None else _clock(doc.clock)
    return Scenario(name=doc.name, config=config, workloads=workloads, steps=steps, clock=clock)


def _clock(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ScenarioError(
            f"clock: {text!r} is not an ISO 8601 time (e.g. 2026-11-01T00:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        raise ScenarioError(f"clock: {text!r} names no time zone (end it with Z for UTC)")
    return moment.astimezone(UTC)


class _Checker:
    """Cross-field checks: known queues and flavors, unique names, sane counts."""

    def __init__(self, config: QuotaConfig) -> None:
        self.queues = {q.name for q in config.cluster_queues}
        self.flavors = set(config.flavors)
        self.names: set[str] = set()

    def workload(self, path: str, doc: WorkloadDoc) -> InitialWorkload:
        if doc.name in self.names:
            raise ScenarioError(f"{path}.name: workload {doc.name!r} is declared twice")
        if doc.cluster_queue not in self.queues:
            raise ScenarioError(
                f"{path}.cluster_queue: unknown cluster queue {doc.cluster_queue!r}"
            )
        if not doc.pod_sets:
            raise ScenarioError(f"{path}.pod_sets: a workload needs at least one pod set")
        pod_sets = tuple(
            self._pod_set(f"{path}.pod_sets[{i}]", p) for i, p in enumerate(doc.pod_sets)
        )
        if len({p.name for p in pod_sets}) != len(pod_sets):
            raise ScenarioError(f"{path}.pod_sets: pod set names must be unique")
        workload = Workload(
            name=doc.name,
            cluster_queue=doc.cluster_queue,
            pod_sets=pod_sets,
            priority=doc.priority,
            created=float(doc.created),
            max_runtime=(
                None
                if doc.max_runtime is None
                else duration_at(f"{path}.max_runtime", doc.max_runtime, ScenarioError)
            ),
        )
        self.names.add(doc.name)
        admission = None
        if doc.admitted is not None:
            admission = self._admission(f"{path}.admitted", workload, doc.admitted)
        elif doc.admitted_at is not None:
            raise ScenarioError(f"{path}.admitted_at: only a workload with `admitted` has one")
        admitted_at = None if doc.admitted_at is None else float(doc.admitted_at)
        return InitialWorkload(workload, admission, admitted_at)

    def _pod_set(self, path: str, doc: PodSetDoc) -> PodSet:
        if doc.count < 0:
            raise ScenarioError(f"{path}.count: must not be negative")
        if doc.min_count is not None and not 0 <= doc.min_count <= doc.count:
            raise ScenarioError(f"{path}.min_count: must be between 0 and count ({doc.count})")
        requests = {
            resource: quantity_at(f"{path}.requests[{resource!r}]", value, ScenarioError)
            for resource, value in doc.requests.items()
        }
        budgets = [r for r in requests if is_budget(r)]
        if budgets:
            raise ScenarioError(
                f"{path}.requests[{budgets[0]!r}]: a budget is committed from the max"
                " runtime, not requested"
            )
        return PodSet(name=doc.name, count=doc.count, requests=requests, min_count=doc.min_count)

    def _admission(
        self, path: str, workload: Workload, docs: dict[str, AdmittedPodSetDoc]
    ) -> Admission:
        by_name = {p.name: p for p in workload.pod_sets}
        assigned = []
        for name, doc in docs.items():
            ppath = f"{path}[{name!r}]"
            pod_set = by_name.get(name)
            if pod_set is None:
                raise ScenarioError(f"{ppath}: the workload has no pod set {name!r}")
            if not 0 <= doc.count <= pod_set.count:
                raise ScenarioError(f"{ppath}.count: must be between 0 and {pod_set.count}")
            for resource, flavor in doc.flavors.items():
                if flavor not in self.flavors:
                    raise ScenarioError(f"{ppath}.flavors[{resource!r}]: unknown flavor {flavor!r}")
            missing = [r for r, v in pod_set.requests.items() if v and r not in doc.flavors]
            if missing:
                raise ScenarioError(f"{ppath}.flavors: no flavor given for {', '.join(missing)}")
            assigned.append(PodSetAssignment(name=name, count=doc.count, flavors=doc.flavors))
        absent = [p.name for p in workload.pod_sets if p.name not in docs]
        if absent:
            raise ScenarioError(f"{path}: pod set {absent[0]!r} has no admission")
        return Admission(cluster_queue=workload.cluster_queue, pod_sets=tuple(assigned))

    def step(self, path: str, doc: StepDoc) -> Step:
        given = [f for f in StepDoc.__struct_fields__ if getattr(doc, f) is not UNSET]
        if len(given) != 1:
            raise ScenarioError(
                f"{path}: a step is exactly one of schedule, expect, submit, finish, delete,"
                " advance" + (f" (got {', '.join(given)})" if given else "")
            )
        if not isinstance(doc.schedule, msgspec.UnsetType):
            cycles = doc.schedule.cycles if doc.schedule else None
            if cycles is not None and cycles < 1:
                raise ScenarioError(f"{path}.schedule.cycles: must be at least 1")
            return Schedule(cycles)
        if not isinstance(doc.expect, msgspec.UnsetType):
            return self._expect(path, doc.expect)
        if not isinstance(doc.advance, msgspec.UnsetType):
            return Advance(duration_at(f"{path}.advance", doc.advance, ScenarioError))
        if not isinstance(doc.submit, msgspec.UnsetType):
            return Submit(
                tuple(self.workload(f"{path}.submit[{i}]", w) for i, w in enumerate(doc.submit))
            )
        names = doc.finish if not isinstance(doc.finish, msgspec.UnsetType) else doc.delete
        assert not isinstance(names, msgspec.UnsetType)
        verb = given[0]
        for i, name in enumerate(names):
            if name not in self.names:
                raise ScenarioError(f"{path}.{verb}[{i}]: unknown workload {name!r}")
        return Finish(tuple(names)) if verb == "finish" else Delete(tuple(names))

    @staticmethod
    def _expect(path: str, doc: ExpectDoc) -> Expect:
        admitted = None
        if not isinstance(doc.admitted, msgspec.UnsetType):
            admitted = {
                w: {p: ExpectedPodSet(e.count, e.flavors) for p, e in pod_sets.items()}
                for w, pod_sets in doc.admitted.items()
            }
        pending = None if isinstance(doc.pending, msgspec.UnsetType) else frozenset(doc.pending)
        preempted = (
            None if isinstance(doc.preempted, msgspec.UnsetType) else frozenset(doc.preempted)
        )
        budgets = None
        if not isinstance(doc.budgets, msgspec.UnsetType):
            budgets = {
                level: {
                    flavor: {
                        resource: _amounts(f"{path}.budgets[{level!r}]", amounts)
                        for resource, amounts in resources.items()
                    }
                    for flavor, resources in flavors.items()
                }
                for level, flavors in doc.budgets.items()
            }
        return Expect(admitted, pending, preempted, budgets)


def _amounts(path: str, doc: ExpectBudgetDoc) -> dict[str, Decimal]:
    amounts = {}
    for key in ("charged", "committed"):
        value = getattr(doc, key)
        if value is None:
            continue
        try:
            amounts[key] = Decimal(str(value).strip())
        except ArithmeticError:
            raise ScenarioError(f"{path}.{key}: {value!r} is not a number of hours") from None
    return amounts
