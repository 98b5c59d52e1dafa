"""Helpers of the observability tests: read a scrape, capture log lines."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from gateway.observability.logs import formatter
from gateway.settings import Settings


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of series ``name`` (with its suffix, e.g. ``_total``) in a scrape."""
    found = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found.append((dict(sample.labels), sample.value))
    return found


def value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels`` (0 if none)."""
    return sum(v for have, v in samples(text, name) if labels.items() <= have.items())


class Captured:
    def __init__(self, stream: io.StringIO) -> None:
        self.stream = stream

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.text.splitlines() if line.strip()]

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line.get("event") == name]


@contextmanager
def captured_logs(settings: Settings) -> Iterator[Captured]:
    """Every log record of the gateway's loggers (``ignara.*``, ``gateway.*``) at INFO
    and above, rendered as the app renders them (JSON, scrubbed). On those loggers, not
    the root: building an app hands the root's handlers to Litestar's set-up."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter(settings))
    handler.setLevel(logging.INFO)
    loggers = [logging.getLogger(name) for name in ("ignara", "gateway", "tenants")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        yield Captured(stream)
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)
