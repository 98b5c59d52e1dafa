"""The embedded engine prepares the gateway's decisions as it loads: the first
evaluation of a decision prepares its query, which costs tens of times an evaluation,
and a first request paying it on a busy machine could time out and fail closed."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.policy import (
    DECISIONS,
    EmbeddedOpa,
    GolibEvaluator,
    create_policy_engine,
)
from gateway.policy.checks import decision_ref
from tests.policy.conftest import DATA

asked: list[tuple[str, object]] = []


class _Recording(GolibEvaluator):
    """The real engine, noting what it is asked."""

    def evaluate(self, ref: str, input: Mapping[str, object] | None) -> object:
        asked.append((ref, input))
        return super().evaluate(ref, input)


async def test_load_asks_each_decision_once_before_it_serves(policies: dict[str, str]) -> None:
    asked.clear()
    # One that is undefined and one that fails for an empty input must not fail the load.
    warm = ("ignara.authz.decision", "ignara.nothing.decision", "ignara.admission.decision")
    engine = EmbeddedOpa(timeout=5, evaluator_factory=_Recording, warm=warm)
    try:
        await engine.load(policies, DATA)
        assert asked == [(ref, {}) for ref in _refs(warm)]
        # Loading again prepares the new engine too.
        await engine.load(policies, DATA)
        assert len(asked) == 2 * len(warm)
        assert await engine.ready()
    finally:
        await engine.close()


async def test_an_engine_without_decisions_to_prepare_asks_nothing(
    policies: dict[str, str],
) -> None:
    asked.clear()
    engine = EmbeddedOpa(timeout=5, evaluator_factory=_Recording)
    try:
        await engine.load(policies, DATA)
        assert asked == []
    finally:
        await engine.close()


def test_the_gateways_embedded_engine_prepares_every_decision_it_asks_for() -> None:
    engine = create_policy_engine(None)
    assert isinstance(engine, EmbeddedOpa)
    assert engine._warm == _refs(DECISIONS)


def _refs(paths: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(decision_ref(path) for path in paths)
