"""The backend vocabulary: job specs refuse bad input, states know which are final."""

from __future__ import annotations

import pytest

import gateway.backends as backends
from gateway.backends import (
    MAX_RUNTIME_SECONDS,
    InvalidJobError,
    InvalidWorkloadIdError,
    JobSpec,
    JobState,
    validate_workload_id,
)

BAD_IDS = ["", "A", "wl_1", "../x", "a/b", ".", "..", "a b", "a\n", "é", "x" * 65, "-\0"]


def test_exported_names_are_the_public_ones() -> None:
    public = {name for name in dir(backends) if not name.startswith("_")}
    public -= {
        "base",
        "local",
        "isolation",
        "registry",
        "sections",
        "slurm",
        "kubernetes",
        "ray",
    }  # submodules, reachable but not re-exported names
    assert sorted(backends.__all__) == sorted(public)


@pytest.mark.parametrize("workload_id", ["a", "wl-1", "0", "-", "x" * 64])
def test_good_workload_ids_are_accepted(workload_id: str) -> None:
    assert validate_workload_id(workload_id) == workload_id
    assert JobSpec(workload_id, ("true",), {}, 1).workload_id == workload_id


@pytest.mark.parametrize("workload_id", BAD_IDS)
def test_bad_workload_ids_are_refused(workload_id: str) -> None:
    with pytest.raises(InvalidWorkloadIdError, match="invalid workload id"):
        JobSpec(workload_id, ("true",), {}, 1)


def test_a_non_string_id_is_refused() -> None:
    with pytest.raises(InvalidWorkloadIdError):
        validate_workload_id(42)


@pytest.mark.parametrize(
    ("command", "env", "runtime", "message"),
    [
        ((), {}, 1, "empty"),
        (("",), {}, 1, "program name is empty"),
        (("echo", "a\0b"), {}, 1, "NUL"),
        (("true",), {"A=B": "x"}, 1, "invalid environment variable name"),
        (("true",), {"": "x"}, 1, "invalid environment variable name"),
        (("true",), {"A": "x\0"}, 1, "NUL"),
        (("true",), {}, 0, "between 1 and"),
        (("true",), {}, -5, "between 1 and"),
        (("true",), {}, MAX_RUNTIME_SECONDS + 1, "between 1 and"),
        (("true",), {}, True, "integer"),
        (("true",), {}, 1.5, "integer"),
    ],
)
def test_malformed_specs_are_refused(
    command: tuple[str, ...], env: dict[str, str], runtime: int, message: str
) -> None:
    with pytest.raises(InvalidJobError, match=message):
        JobSpec("wl-1", command, env, runtime)


def test_spec_copies_its_inputs() -> None:
    command = ["echo", "hi"]
    env = {"A": "1"}
    spec = JobSpec("wl-1", command, env, 5)  # type: ignore[arg-type]  # a list on purpose
    command.append("changed")
    env["A"] = "2"
    assert spec.command == ("echo", "hi")
    assert dict(spec.env) == {"A": "1"}
    with pytest.raises(TypeError):
        spec.env["A"] = "3"  # type: ignore[index]


def test_final_states() -> None:
    final = {state for state in JobState if state.is_final}
    assert final == {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.LOST}
