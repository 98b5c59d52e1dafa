"""What operators watch: Prometheus metrics, OpenTelemetry traces, structured logs."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.observability.logs import ACCESS_LOGGER, Events, secrets_of
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.tracing import SpanFactory, Tracing, spans_of
from gateway.settings import Settings

__all__ = ["Events", "GatewayMetrics", "Observability", "Tracing"]


@dataclass
class Observability:
    """One app's metrics (None: off), tracer (None: no endpoint), event log and access
    log (None: off), handed to whatever reports."""

    metrics: GatewayMetrics | None = None
    tracing: Tracing | None = None
    events: Events = field(default_factory=Events)
    access: Events | None = None
    log_prompts: bool = False

    @property
    def span(self) -> SpanFactory:
        return spans_of(self.tracing)

    @classmethod
    def build(cls, settings: Settings) -> Observability:
        options = settings.observability
        secrets = secrets_of(settings)
        return cls(
            metrics=(
                GatewayMetrics(multiproc_dir=options.multiproc_dir) if options.metrics else None
            ),
            tracing=Tracing.create(options),
            events=Events(secrets=secrets),
            access=(
                Events(ACCESS_LOGGER, secrets=secrets, prompts=options.log_prompts)
                if settings.server.access_log
                else None
            ),
            log_prompts=options.log_prompts,
        )
