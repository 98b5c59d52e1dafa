"""Traces: a real OTLP/HTTP collector on 127.0.0.1 receives the spans of an inference
call and of an admission pass; without an endpoint no tracer exists."""

from __future__ import annotations

import dataclasses
import gzip
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from gateway.admission import AdmissionRuntime
from gateway.app import create_app
from gateway.observability import Observability, Tracing
from gateway.observability.tracing import no_span
from gateway.settings import ObservabilitySettings, Settings
from tenants import Database
from tests.inference.test_v1_api import CHAT, running_gateway
from tests.support.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration


class Collector:
    """Spans (name, trace id, parent span id, attributes) posted to /v1/traces."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, bytes, bytes, dict[str, object]]] = []
        self.services: set[str] = set()
        self.lock = threading.Lock()

    def names(self) -> list[str]:
        with self.lock:
            return [name for name, *_ in self.spans]


@pytest.fixture
def collector() -> Iterator[tuple[Collector, str]]:
    found = Collector()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.headers.get("content-encoding") == "gzip":
                raw = gzip.decompress(raw)
            request = ExportTraceServiceRequest.FromString(raw)
            with found.lock:
                for resource in request.resource_spans:
                    for attribute in resource.resource.attributes:
                        if attribute.key == "service.name":
                            found.services.add(attribute.value.string_value)
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            attributes = {
                                a.key: a.value.string_value or a.value.int_value
                                for a in span.attributes
                            }
                            found.spans.append(
                                (span.name, span.trace_id, span.parent_span_id, attributes)
                            )
            body = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found, f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
async def upstream() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(models=("fake-model",), completion_tokens=5) as fake:
        yield fake


async def test_an_inference_call_sends_its_spans(
    settings: Settings, upstream: FakeOpenAI, collector: tuple[Collector, str]
) -> None:
    found, endpoint = collector
    traced = dataclasses.replace(
        settings,
        observability=ObservabilitySettings(
            otlp_traces_endpoint=endpoint, service_name="ignara-test"
        ),
    )
    async with running_gateway(traced, upstream, None) as gateway:
        await gateway.client("alpha").chat.completions.create(
            model="fake-model", messages=CHAT, max_tokens=20
        )
        await gateway.settled()
        tracing = gateway.services.observe.tracing
        assert tracing is not None and tracing.flush()
    names = found.names()
    assert found.services == {"ignara-test"}
    (root,) = [s for s in found.spans if s[0] == "POST /v1/chat/completions"]
    assert root[3]["http.response.status_code"] == 200
    trace = [s for s in found.spans if s[1] == root[1]]
    steps = {name for name, *_ in trace}
    assert {"auth", "policy", "reservation", "upstream", "settle"} <= steps, names
    (reservation,) = [s for s in trace if s[0] == "reservation"]
    assert reservation[3]["ignara.queue"] == "team-a"


async def test_an_admission_pass_sends_its_span(
    database: Database, collector: tuple[Collector, str]
) -> None:
    found, endpoint = collector
    tracing = Tracing.create(ObservabilitySettings(otlp_traces_endpoint=endpoint))
    assert tracing is not None
    runtime = AdmissionRuntime(database, {}, observe=Observability(tracing=tracing))
    try:
        assert await runtime.step()
    finally:
        await runtime.stop()
    assert tracing.flush()
    tracing.shutdown()
    assert "admission.pass" in found.names()


def test_without_an_endpoint_there_is_no_tracer(settings: Settings, tmp_path: Path) -> None:
    assert Settings.from_env({}).observability.otlp_traces_endpoint is None
    app = create_app(settings)
    services = app.state["services"]
    assert services.observe.tracing is None
    assert services.inference._span is no_span
    assert app.inference_routes._tracing is None


def test_the_otlp_variables_are_read_as_the_sdk_reads_them() -> None:
    base = Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"})
    assert base.observability.otlp_traces_endpoint == "http://collector:4318/v1/traces"
    full = Settings.from_env(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://ignored:4318",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/custom",
            "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=abc, other = 1",
        }
    )
    assert full.observability.otlp_traces_endpoint == "http://collector:4318/custom"
    assert dict(full.observability.otlp_headers) == {"x-api-key": "abc", "other": "1"}
    assert "abc" not in repr(full.observability)
    with pytest.raises(ValueError, match="http/protobuf"):
        Settings.from_env(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
        )
    off = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}
    assert Settings.from_env(off).observability.otlp_traces_endpoint is None
