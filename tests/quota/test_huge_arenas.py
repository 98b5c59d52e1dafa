"""``bench/huge_arenas.py``, the measuring aid that backs pymalloc's arenas with huge
pages: objects made after it is installed live in its advised regions and stay intact,
freed arenas are reused rather than new regions reserved, and the admission benchmark
decides exactly the same with it. Each check runs in a process of its own: the allocator
cannot be taken out of a process once in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import huge_arenas
from tests.support.python_runs import run_python

# Made after install(): about 120 MiB of lists, checked, freed, made again. Then the
# flags of the mapping that holds the first list made again, from /proc/self/smaps:
# "hg" when madvise(MADV_HUGEPAGE) was taken there.
_PROBE = """
import json, sys
from pathlib import Path
from bench import huge_arenas
huge_arenas.install(Path(sys.argv[1]))
first = [[i, i + 1] for i in range(1_000_000)]
assert all(pair[1] - pair[0] == 1 for pair in first)
made = huge_arenas.stats()
del first
freed = huge_arenas.stats()
again = [[i, i + 1] for i in range(1_000_000)]
assert sum(pair[0] for pair in again) == 999_999 * 1_000_000 // 2
remade = huge_arenas.stats()
flags = []
inside = False
for line in open("/proc/self/smaps"):
    head = line.split()
    if "-" in head[0] and len(head) >= 5:
        start, end = (int(x, 16) for x in head[0].split("-"))
        inside = start <= id(again[0]) < end
    elif inside and line.startswith("VmFlags:"):
        flags = line.split()[1:]
print(json.dumps({"made": made, "freed": freed, "remade": remade, "flags": flags}))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return huge_arenas.build(tmp_path_factory.mktemp("huge-arenas"))


def test_the_build_is_kept_until_the_source_changes(built: Path) -> None:
    stamp = (built / "source.sha256").stat().st_mtime_ns
    assert huge_arenas.build(built) == built
    assert (built / "source.sha256").stat().st_mtime_ns == stamp


def test_arenas_come_from_advised_regions_and_are_reused(built: Path) -> None:
    seen = json.loads(run_python(["-c", _PROBE, str(built)]).strip().splitlines()[-1])
    made, freed, remade = seen["made"], seen["freed"], seen["remade"]
    # About 120 MiB of lists and their ints: at least 90 arenas of 1 MiB, two regions.
    assert made["most_arenas"] >= 90 and made["regions"] >= 2
    assert freed["arenas"] < made["arenas"]  # the lists' arenas were given back...
    assert remade["regions"] == made["regions"]  # ...and taken again, no region more
    assert "hg" in seen["flags"]  # the kernel was asked for huge pages there


@pytest.mark.parametrize(
    ("mode", "decisions"),
    [
        (["--completions"], ("cycles", "admitted", "preempted", "completed")),
        ([], ("cycles", "admitted", "admitted_final", "preempted")),
    ],
    ids=["churn", "drain"],
)
def test_the_benchmark_decides_the_same_with_huge_page_arenas(
    mode: list[str], decisions: tuple[str, ...]
) -> None:
    args = ["-m", "bench.admission", "--preemption", *mode, "--workloads", "2000", "--queues", "20"]
    plain = json.loads(run_python(args).strip().splitlines()[-1])
    huge = json.loads(run_python([*args, "--huge-page-arenas"]).strip().splitlines()[-1])
    assert "huge_page_arenas" not in plain  # only a run that installed them reports them
    assert huge["huge_page_arenas"]["most_arenas"] > 0
    assert {k: huge[k] for k in decisions} == {k: plain[k] for k in decisions}
