"""Rego unit tests (`test_` rules) found in modules and judged from their values.

There is no `opa test` here, so this is its substitute, shared by every backend:
a backend supplies "evaluate this document" and `run_rego_tests` does the rest,
evaluating each test package once and only a failing test again on its own (to
say why it failed).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from itertools import groupby

from gateway.policy.errors import EvaluationError, UndefinedDocumentError

__all__ = [
    "Evaluate",
    "RegoOutcome",
    "RegoTest",
    "RegoTestResult",
    "discover_tests",
    "run_rego_tests",
]

_PACKAGE = re.compile(r"^package\s+([A-Za-z_][A-Za-z0-9_.]*)\s*$", re.MULTILINE)
_TEST = re.compile(r"^(todo_)?(test_[A-Za-z0-9_]*)\b", re.MULTILINE)

Evaluate = Callable[[str], Awaitable[object]]
"""Evaluate ``data.<ref>`` with empty input; raise `UndefinedDocumentError` or
`EvaluationError` when it has no value."""


class RegoOutcome(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class RegoTest:
    """One `test_` rule; `todo_test_` rules are found but skipped."""

    package: str
    name: str
    todo: bool = False

    @property
    def ref(self) -> str:
        return f"{self.package}.{self.name}"


@dataclass(frozen=True, slots=True)
class RegoTestResult:
    test: RegoTest
    outcome: RegoOutcome
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.outcome is RegoOutcome.PASSED


def discover_tests(modules: Mapping[str, str]) -> list[RegoTest]:
    """Every `test_` rule defined at column 0 of each module, in order, once each."""
    seen: dict[str, RegoTest] = {}
    for source in modules.values():
        package = _PACKAGE.search(source)
        if package is None:
            continue
        for match in _TEST.finditer(source):
            test = RegoTest(package.group(1), match.group(0), todo=match.group(1) is not None)
            seen.setdefault(test.ref, test)
    return list(seen.values())


async def run_rego_tests(tests: Iterable[RegoTest], evaluate: Evaluate) -> list[RegoTestResult]:
    """Run tests package by package; a test passes when its value is ``true``."""
    results: list[RegoTestResult] = []
    for package, group in groupby(sorted(tests, key=lambda t: t.package), key=lambda t: t.package):
        values = await _package_values(package, evaluate)
        for test in group:
            results.append(await _judge(test, values, evaluate))
    return results


async def _package_values(package: str, evaluate: Evaluate) -> Mapping[str, object]:
    try:
        values = await evaluate(package)
    except EvaluationError:
        return {}  # some test errs; judge each one on its own
    return values if isinstance(values, Mapping) else {}


async def _judge(
    test: RegoTest, values: Mapping[str, object], evaluate: Evaluate
) -> RegoTestResult:
    if test.todo:
        return RegoTestResult(test, RegoOutcome.SKIPPED, "todo_")
    if values.get(test.name) is True:
        return RegoTestResult(test, RegoOutcome.PASSED)
    try:
        value = await evaluate(test.ref)
    except UndefinedDocumentError:
        return RegoTestResult(test, RegoOutcome.FAILED, "undefined: a condition in its body failed")
    except EvaluationError as exc:
        return RegoTestResult(test, RegoOutcome.ERROR, str(exc))
    if value is True:
        return RegoTestResult(test, RegoOutcome.PASSED)
    return RegoTestResult(test, RegoOutcome.FAILED, f"value is {value!r}, not true")
