"""Structured logs: one JSON object a line, through structlog and the standard library.

:class:`Events` writes the lines that say what the gateway did (a workload admitted,
preempted, dispatched, finished; leadership taken or lost; the config reloaded; a key
created, rotated or revoked) and, when access logging is on, one line per request.
They go to the standard library's logger ``ignara.events`` (``ignara.access``) already
as structlog event dicts; :func:`logging_config` (Litestar's set-up, applied when the
app is built) renders those and every other library's lines as JSON.

Nothing secret is written: fields named like a secret are replaced, any API key token
(``ign_...``) and the gateway's own secrets are cut out of every value, and what a
caller sent (``prompt``, ``messages``, ``input``) is dropped unless prompt logging is
on (``IGNARA_LOG_PROMPTS``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

import structlog
from litestar.logging.config import LoggingConfig
from structlog.typing import EventDict, Processor, WrappedLogger

from gateway.settings import Settings

__all__ = [
    "ACCESS_LOGGER",
    "EVENTS_LOGGER",
    "Events",
    "Scrubber",
    "formatter",
    "json_formatter",
    "logging_config",
]

EVENTS_LOGGER = "ignara.events"
ACCESS_LOGGER = "ignara.access"
REDACTED = "[redacted]"
SECRET_FIELDS = frozenset(
    {"token", "api_key", "authorization", "secret", "password", "pepper", "admin_key"}
)
PROMPT_FIELDS = frozenset({"prompt", "messages", "input"})
_API_TOKEN = re.compile(r"ign_[A-Za-z0-9_\-]{6,}")
_BEARER = re.compile(r"(?i)(bearer\s+)\S+")


class Scrubber:
    """A structlog processor that takes secrets (and, unless allowed, prompts) out."""

    def __init__(self, secrets: Iterable[str] = (), *, prompts: bool = False) -> None:
        # Short values would cut ordinary words out of lines; real secrets are long.
        self.secrets = tuple(s for s in secrets if len(s) >= 8)
        self.prompts = prompts

    def __call__(self, _: WrappedLogger, __: str, event: EventDict) -> EventDict:
        for name in list(event):
            lowered = name.lower()
            if lowered in SECRET_FIELDS:
                event[name] = REDACTED
            elif lowered in PROMPT_FIELDS and not self.prompts:
                del event[name]
            else:
                event[name] = self._clean(event[name])
        return event

    def _clean(self, value: Any) -> Any:
        if isinstance(value, str):
            if "ign_" in value:
                value = _API_TOKEN.sub("ign_" + REDACTED, value)
            if "earer" in value:
                value = _BEARER.sub(r"\1" + REDACTED, value)
            for secret in self.secrets:
                if secret in value:
                    value = value.replace(secret, REDACTED)
            return value
        if isinstance(value, dict):
            return {
                k: REDACTED if str(k).lower() in SECRET_FIELDS else self._clean(v)
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self._clean(v) for v in value]
        return value


def secrets_of(settings: Settings) -> tuple[str, ...]:
    auth = settings.auth
    return tuple(s for s in (auth.admin_key, auth.pepper) if s)


class Events:
    """Writes event lines to one standard-library logger (see the module's text)."""

    def __init__(
        self,
        name: str = EVENTS_LOGGER,
        *,
        secrets: Iterable[str] = (),
        prompts: bool = False,
    ) -> None:
        self.logger = logging.getLogger(name)
        processors: list[Processor] = [
            structlog.stdlib.filter_by_level,
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            Scrubber(secrets, prompts=prompts),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ]
        self._log: Any = structlog.wrap_logger(
            self.logger, processors=processors, wrapper_class=structlog.stdlib.BoundLogger
        )

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)

    def info(self, event: str, **fields: Any) -> None:
        self._log.info(event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._log.warning(event, **fields)


def formatter(settings: Settings) -> logging.Formatter:
    """Renders records as JSON (or for a terminal): structlog's events as they are, any
    other library's with its level, logger name and time added, all scrubbed."""
    return json_formatter(settings.observability.log_format, list(secrets_of(settings)))


def json_formatter(log_format: str = "json", secrets: list[str] | None = None) -> logging.Formatter:
    """:func:`formatter` by its parts (``logging.config`` builds it from a dict)."""
    renderer: Processor = (
        structlog.dev.ConsoleRenderer(colors=False)
        if log_format == "console"
        else structlog.processors.JSONRenderer()
    )
    return structlog.stdlib.ProcessorFormatter(
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            Scrubber(secrets or (), prompts=True),
            renderer,
        ],
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
    )


def logging_config(settings: Settings) -> LoggingConfig:
    """Litestar's logging set-up (it applies it when the app is built: a queue and one
    handler on stderr for the whole process) with every line rendered by
    :func:`formatter` at the configured level."""
    return LoggingConfig(
        formatters={
            "standard": {
                "()": json_formatter,
                "log_format": settings.observability.log_format,
                "secrets": list(secrets_of(settings)),
            }
        },
        root={"level": settings.server.log_level.upper(), "handlers": ["queue_listener"]},
        # Our access lines say what uvicorn's would, with tenants, keys and tokens.
        loggers={"uvicorn.access": {"level": "WARNING", "propagate": False, "handlers": []}},
    )
