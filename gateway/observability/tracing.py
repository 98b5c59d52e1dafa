"""OpenTelemetry traces, exported over OTLP/HTTP, only when an endpoint is configured.

Unset (``OTEL_EXPORTER_OTLP_ENDPOINT``), :meth:`Tracing.create` returns None: the SDK is
not even imported, and the code paths that trace hold :func:`no_span` instead, a
context manager that does nothing. Set, each app has its own tracer provider (never
the process-wide one, so two apps in one process do not share spans) and a batching
exporter whose thread posts to the collector; the app's lifespan flushes it at exit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from gateway.settings import ObservabilitySettings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span

__all__ = ["SpanFactory", "Tracing", "no_span", "spans_of"]

SpanFactory = Callable[..., AbstractContextManager[Any]]

_NOTHING: AbstractContextManager[None] = contextlib.nullcontext()


def no_span(name: str, attributes: Mapping[str, Any] | None = None) -> AbstractContextManager[None]:
    """What traces a step when tracing is off: nothing (one shared object)."""
    return _NOTHING


class Tracing:
    """One app's tracer; see :meth:`create`."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self._tracer = provider.get_tracer("ignara.gateway")

    @classmethod
    def create(cls, settings: ObservabilitySettings) -> Tracing | None:
        endpoint = settings.otlp_traces_endpoint
        if endpoint is None:
            return None
        # Imported here: without an endpoint the SDK never loads.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}))
        exporter = OTLPSpanExporter(endpoint=endpoint, headers=dict(settings.otlp_headers))
        provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(provider)

    def span(
        self, name: str, attributes: Mapping[str, Any] | None = None, *, server: bool = False
    ) -> AbstractContextManager[Span]:
        """A span, current within its ``with`` (child spans and tasks started inside
        it are its children)."""
        from opentelemetry.trace import SpanKind

        kind = SpanKind.SERVER if server else SpanKind.INTERNAL
        return self._tracer.start_as_current_span(name, attributes=attributes, kind=kind)

    def flush(self, timeout_seconds: float = 5.0) -> bool:
        return self.provider.force_flush(int(timeout_seconds * 1000))

    def shutdown(self) -> None:
        self.provider.shutdown()


def spans_of(tracing: Tracing | None) -> SpanFactory:
    """How a component opens a span: the tracer's, or :func:`no_span`."""
    return no_span if tracing is None else tracing.span
