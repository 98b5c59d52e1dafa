"""One replay from files to outputs: what ``ignara replay`` runs, minus the terminal."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from quota.config import parse_quota_config
from quota.errors import ConfigError
from quota.model import QuotaConfig
from quota.replay.policies import PolicyError, check_policy, scale_config
from quota.replay.report import render_html
from quota.replay.trace import TraceJob, load_trace

__all__ = ["ReplayInputs", "load_inputs", "load_quota_file", "parse_window", "write_outputs"]

MAX_QUOTA_BYTES = 4 * 2**20


@dataclass(frozen=True)
class ReplayInputs:
    config: QuotaConfig
    jobs: list[TraceJob]


def parse_window(start: str | None, end: str | None) -> tuple[datetime | None, datetime | None]:
    """``--from`` and ``--to`` as UTC instants. A bare date ``--to`` includes that whole
    day (``--from 2017-10-01 --to 2017-11-30`` is October and November)."""

    def moment(text: str, *, closing: bool) -> datetime:
        try:
            value = datetime.fromisoformat(text.strip())
        except ValueError:
            raise PolicyError(f"{text!r} is not a date (YYYY-MM-DD or an ISO time)") from None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        if closing and len(text.strip()) == 10:
            value += timedelta(days=1)
        return value

    first = None if start is None else moment(start, closing=False)
    last = None if end is None else moment(end, closing=True)
    if first is not None and last is not None and last <= first:
        raise PolicyError("--to must be after --from")
    return first, last


def engine_build() -> str:
    """``compiled`` when the engine's cycle runs as mypyc extension modules (see
    ``bench/compile_engine.py``), else ``python``."""
    import quota.scheduler

    return "compiled" if Path(quota.scheduler.__file__ or "").suffix == ".so" else "python"


def load_quota_file(path: str | Path) -> QuotaConfig:
    """A quota configuration file (YAML or JSON: ``flavors``, ``cohorts``,
    ``cluster_queues``, ``fair_sharing``)."""
    file = Path(path)
    try:
        if file.stat().st_size > MAX_QUOTA_BYTES:
            raise ConfigError(f"{path}: larger than {MAX_QUOTA_BYTES // 2**20} MiB")
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text") from None
    except yaml.YAMLError:
        raise ConfigError(f"{path} is not valid YAML") from None
    return parse_quota_config(data)


def load_inputs(
    trace: str | Path,
    quota: str | Path,
    policy: str,
    *,
    scale: float = 1.0,
    start: datetime | None = None,
    end: datetime | None = None,
    limit: int | None = None,
) -> ReplayInputs:
    """The scaled configuration (checked against ``policy``) and the jobs to play:
    those submitted in the window, the first ``limit`` of them if given."""
    config = load_quota_file(quota)
    check_policy(config, policy)
    config = scale_config(config, scale)
    jobs = load_trace(trace, start=start, end=end)
    if limit is not None:
        jobs = jobs[:limit]
    return ReplayInputs(config, jobs)


def write_outputs(out: str | Path, summary: dict[str, Any], title: str) -> Sequence[Path]:
    """``summary.json`` and ``report.html`` in ``out`` (made if missing)."""
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    summary_file = directory / "summary.json"
    report_file = directory / "report.html"
    summary_file.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    report_file.write_text(render_html(summary, title), encoding="utf-8")
    return (summary_file, report_file)
