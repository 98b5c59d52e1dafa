"""The small pieces: decision parsing, path spelling, the loader, test discovery."""

from __future__ import annotations

from pathlib import Path

import pytest

import gateway.policy
from gateway.policy import (
    Decision,
    EmbeddedOpa,
    FailureKind,
    OpaServer,
    PolicyEngine,
    PolicyLoadError,
    RegoTest,
    create_policy_engine,
    discover_tests,
    load_policies,
    load_tests,
)
from gateway.policy.checks import decision_ref, json_input
from tests.policy.conftest import POLICY_DIR


def test_public_names_are_exactly_all() -> None:
    public = {name for name in vars(gateway.policy) if not name.startswith("_")}
    modules = {"checks", "decision", "embedded", "engine", "errors", "factory", "golib"}
    modules |= {"loader", "rego_tests", "server", "annotations", "data", "failclosed"}
    assert sorted(public - modules) == sorted(gateway.policy.__all__)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"allow": True, "reasons": []}, Decision(True)),
        ({"allow": False, "reasons": ["b", "a"], "extra": 1}, Decision(False, ("b", "a"))),
        ({"allow": True, "reasons": ["note"]}, Decision(True, ("note",))),
    ],
)
def test_well_formed_results(value: object, expected: Decision) -> None:
    assert Decision.from_result(value, "p.d") == expected


@pytest.mark.parametrize(
    "value",
    [None, [], "allow", 1, {"allow": 1, "reasons": []}, {"allow": None}, {"reasons": []}],
)
def test_malformed_results_deny(value: object) -> None:
    decision = Decision.from_result(value, "p.d")
    assert decision.allow is False
    assert decision.failure is FailureKind.MALFORMED
    assert decision.reasons[0].startswith("policy decision p.d is malformed (")


@pytest.mark.parametrize(
    "path",
    [
        "ignara.authz.decision",
        "ignara/authz/decision",
        "/ignara/authz/decision",
        "data.ignara.authz.decision",
        "data/ignara/authz/decision",
    ],
)
def test_path_spellings(path: str) -> None:
    assert decision_ref(path) == "ignara.authz.decision"


def test_json_input_copies() -> None:
    original = {"a": {"b": [1, 2]}}
    copied = json_input(original)
    assert copied == original
    assert copied["a"] is not original["a"]
    with pytest.raises(ValueError, match="not a JSON object"):
        json_input({"a": float("inf")})


def test_loader_splits_policies_from_tests() -> None:
    policies, tests = load_policies(POLICY_DIR), load_tests(POLICY_DIR)
    assert {"authz.rego", "admission.rego"} <= set(policies)
    assert not any(name.endswith("_test.rego") for name in policies)
    assert tests and all(name.endswith("_test.rego") for name in tests)


def test_loader_reads_subdirectories(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "util.rego").write_text("package lib.util\n")
    (tmp_path / "lib" / "util_test.rego").write_text("package lib.util_test\n")
    assert list(load_policies(tmp_path)) == ["lib/util.rego"]
    assert list(load_tests(tmp_path)) == ["lib/util_test.rego"]


def test_loader_refuses_missing_or_empty_directories(tmp_path: Path) -> None:
    with pytest.raises(PolicyLoadError, match="does not exist"):
        load_policies(tmp_path / "nope")
    with pytest.raises(PolicyLoadError, match="no Rego policies"):
        load_policies(tmp_path)


def test_discovery_finds_tests_and_todos_once() -> None:
    source = "package a.b_test\n\ntest_x if true\n\ntest_x if false\n\ntodo_test_y if true\n"
    source += "not_test_z if true\n    test_indented if true\n"
    assert discover_tests({"m.rego": source}) == [
        RegoTest("a.b_test", "test_x"),
        RegoTest("a.b_test", "todo_test_y", todo=True),
    ]


def test_factory_picks_the_backend() -> None:
    embedded = create_policy_engine(None)
    server = create_policy_engine("http://opa:8181")
    assert isinstance(embedded, EmbeddedOpa)
    assert isinstance(server, OpaServer)
    assert isinstance(embedded, PolicyEngine)
    assert isinstance(server, PolicyEngine)
