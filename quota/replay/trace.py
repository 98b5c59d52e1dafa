"""Reading a GPU job trace (the Philly CSV) and the sizes of its teams.

A trace row is one job: when it was submitted, how long it ran, how many GPUs it
used, and which team (Philly virtual cluster) ran it. Rows come unsorted; the
loader sorts them by submit time (file order breaks ties, so a replay is the
same every time). Timestamps are naive wall-clock times and are read as UTC.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from quota.errors import QuotaError

__all__ = [
    "TraceError",
    "TraceJob",
    "load_team_sizes",
    "load_trace",
    "parse_team_sizes",
    "parse_trace",
]

JOB_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")
# Far above any real job (the Philly maximum is 128 GPUs, 53.6 days): a row past
# them is a broken file, not a bigger cluster.
MAX_GPUS = 100_000
MAX_DURATION = 10 * 365 * 86400.0


class TraceError(QuotaError):
    """A trace or team-size file that cannot be read; the message names the line."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace. ``line`` is its line in the file (1 is the header)."""

    line: int
    team: str
    submit: datetime
    duration: float  # seconds of run time, once admitted
    gpus: int

    @property
    def name(self) -> str:
        return f"job-{self.line}"


def load_trace(
    path: str | Path, *, start: datetime | None = None, end: datetime | None = None
) -> list[TraceJob]:
    """Read a trace file; see :func:`parse_trace`."""
    with _open(path) as handle:
        try:
            return parse_trace(handle, start=start, end=end)
        except UnicodeDecodeError:
            raise TraceError(f"{path} is not UTF-8 text") from None


def parse_trace(
    lines: Iterable[str], *, start: datetime | None = None, end: datetime | None = None
) -> list[TraceJob]:
    """The jobs submitted in ``[start, end)`` (either open), sorted by submit time."""
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None:
        raise TraceError("line 1: the trace is empty (no header)")
    columns = [name.strip() for name in header]
    missing = [c for c in JOB_COLUMNS if c not in columns]
    if missing:
        raise TraceError(f"line 1: the header has no column {missing[0]!r} (has {columns})")
    index = {name: columns.index(name) for name in JOB_COLUMNS}
    jobs = []
    for row in reader:
        if not row or all(not cell.strip() for cell in row):
            continue  # the Philly file ends with a blank line
        job = _job(reader.line_num, row, index)
        if (start is None or job.submit >= start) and (end is None or job.submit < end):
            jobs.append(job)
    jobs.sort(key=lambda job: (job.submit, job.line))
    return jobs


def _job(line: int, row: list[str], index: dict[str, int]) -> TraceJob:
    if len(row) <= max(index.values()):
        raise TraceError(f"line {line}: {len(row)} fields, the header names more")
    stamp, seconds, count = (row[index[c]].strip() for c in JOB_COLUMNS[:3])
    team = row[index["cluster"]].strip()
    try:
        submit = datetime.fromisoformat(stamp)
    except ValueError:
        raise TraceError(f"line {line}: timestamp {stamp!r} is not a date") from None
    submit = submit.replace(tzinfo=UTC) if submit.tzinfo is None else submit.astimezone(UTC)
    try:
        duration = float(seconds)
        gpus = float(count)
    except ValueError:
        raise TraceError(f"line {line}: duration and num_gpus must be numbers") from None
    if not 0 < duration <= MAX_DURATION:  # also refuses NaN
        raise TraceError(f"line {line}: duration {seconds} is out of range")
    if not 1 <= gpus <= MAX_GPUS or not gpus.is_integer():
        raise TraceError(f"line {line}: num_gpus {count} is not a GPU count")
    if not team:
        raise TraceError(f"line {line}: no cluster (team)")
    return TraceJob(line=line, team=team, submit=submit, duration=duration, gpus=int(gpus))


def load_team_sizes(path: str | Path) -> dict[str, int]:
    """Read a team-size file; see :func:`parse_team_sizes`."""
    with _open(path) as handle:
        try:
            return parse_team_sizes(handle)
        except UnicodeDecodeError:
            raise TraceError(f"{path} is not UTF-8 text") from None


def parse_team_sizes(lines: Iterable[str]) -> dict[str, int]:
    """``vc,node num`` rows (Philly's VC sizes): nodes per team, in file order."""
    reader = csv.reader(lines)
    header = [name.strip() for name in next(reader, [])]
    if len(header) < 2:
        raise TraceError("line 1: expected a header like 'vc,node num'")
    sizes: dict[str, int] = {}
    for row in reader:
        if not row or all(not cell.strip() for cell in row):
            continue
        line = reader.line_num
        team, nodes = row[0].strip(), row[1].strip() if len(row) > 1 else ""
        if not team or not nodes.isdigit() or int(nodes) < 1:
            raise TraceError(f"line {line}: expected a team and a positive node count")
        if team in sizes:
            raise TraceError(f"line {line}: team {team!r} is listed twice")
        sizes[team] = int(nodes)
    if not sizes:
        raise TraceError("no team sizes in the file")
    return sizes


def _open(path: str | Path) -> io.TextIOWrapper:
    try:
        return open(path, encoding="utf-8", newline="")  # the caller closes it
    except OSError as err:
        raise TraceError(f"cannot read {path}: {err.strerror or err}") from None
