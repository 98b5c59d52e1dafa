"""Which backend the dispatcher sends a workload's job to: the one it names, else the one
its admitted flavors name, else local; once sent, where it was sent (a preemption clears
the admission, and the job must still be stopped there)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.admission.dispatcher import Dispatcher
from tenants import Database
from tenants.models import WorkloadRow

FLAVORS = {"h100": "hpc", "mi300": "other"}


def row(
    state: str = "admitted",
    named: str | None = None,
    flavors: tuple[str, ...] = (),
    sent_to: str | None = None,
) -> WorkloadRow:
    admission: dict[str, Any] | None = {
        "cluster_queue": "q",
        "pod_sets": [
            {"name": f"p{i}", "count": 1, "flavors": {"nvidia.com/gpu": f}}
            for i, f in enumerate(flavors)
        ],
    }
    return WorkloadRow(
        tenant="t",
        name="w",
        queue="q",
        spec={"backend": named, "pod_sets": [], "max_runtime_seconds": 1, "job": {}},
        state=state,
        admission=admission if state != "pending" else None,
        backend=sent_to,
    )


@pytest.mark.parametrize(
    ("workload", "backend"),
    [
        (row(flavors=("h100",)), "hpc"),
        (row(flavors=("a100",)), "local"),  # a flavor naming no backend
        (row(), "local"),
        (row(named="local", flavors=("h100",)), "local"),  # named wins over the flavor
        (row(flavors=("h100", "a100")), "hpc"),  # unnamed flavors go along
        (row(flavors=("h100", "mi300")), ""),  # two backends cannot host one gang
        (row(state="running", flavors=("a100",), sent_to="hpc"), "hpc"),
        (row(state="pending", sent_to="hpc"), "hpc"),  # preempted: stopped where it ran
        (row(state="admitted", flavors=("a100",), sent_to="hpc"), "local"),  # a new run
    ],
)
def test_the_backend_of_a_workload(workload: WorkloadRow, backend: str) -> None:
    dispatcher = Dispatcher(Database("sqlite:///:memory:"), {}, FLAVORS)
    assert dispatcher.backend_of(workload) == backend


class Remembering:
    """A backend that keeps something per pass: it counts the passes it was told of."""

    name = "hpc"

    def __init__(self) -> None:
        self.passes = 0

    def begin_pass(self) -> None:
        self.passes += 1


async def test_every_pass_tells_a_pass_scoped_backend_it_begins(database: Database) -> None:
    backend = Remembering()
    dispatcher = Dispatcher(database, {"hpc": backend}, FLAVORS)  # type: ignore[dict-item]
    await dispatcher.run_pass()
    await dispatcher.run_pass()
    assert backend.passes == 2
