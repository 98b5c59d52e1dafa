"""The gateway's Prometheus series, in one registry owned by one app.

Kueue's names where Kueue has the series (``pending_workloads``,
``admitted_active_workloads``, ``cluster_queue_resource_usage``, ...), prefixed
``ignara_``; the gateway's own for HTTP, upstreams, tokens and the ledger. Every label
value comes from a bounded set: route templates (never raw paths), configured models,
queues, tenants and endpoints, status codes; no key, workload or call id is a label.

The hot path observes through label children bound once per label set and kept in a
dict (``labels()`` costs a few microseconds: more than the rest of the observation).
The quota gauges are computed at scrape time from the admission leader's last pass
(:class:`gateway.admission.state.LiveBoard`), not kept up to date between scrapes.

With ``PROMETHEUS_MULTIPROC_DIR`` set (read by prometheus-client itself when it is
imported, and by the settings), each process writes its values to files there and a
scrape adds up every process's files.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from gateway.admission.state import LiveSummary

__all__ = ["CONTENT_TYPE", "UNMATCHED", "GatewayMetrics", "method_label"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
UNMATCHED = "unmatched"  # the route label of every path no route serves
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_HTTP = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_UPSTREAM = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_WAIT = (1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 86400.0)
_CYCLE = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def method_label(method: str) -> str:
    return method if method in _METHODS else "other"


def endpoint_label(base_url: str) -> str:
    """An endpoint as a label: scheme, host, port and path; never its user or query."""
    try:
        parts = urlsplit(base_url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "invalid"
    return f"{parts.scheme}://{host}{port}{parts.path}"


class _LiveCollector(Collector):
    """The quota gauges of one summary, set just before a scrape renders them."""

    def __init__(self) -> None:
        self.summary: LiveSummary | None = None

    def describe(self) -> Iterable[Metric]:
        return ()  # nothing to check at registration: the series depend on the config

    def collect(self) -> Iterable[Metric]:
        # Here, not at the top: gateway.admission imports this module.
        from gateway.admission.state import amount

        pending = GaugeMetricFamily(
            "ignara_pending_workloads",
            "Workloads waiting for quota, per cluster queue; inadmissible: in a queue "
            "their tenant may no longer use",
            labels=["cluster_queue", "status"],
        )
        admitted = GaugeMetricFamily(
            "ignara_admitted_active_workloads",
            "Admitted (and running) workloads holding quota, per cluster queue",
            labels=["cluster_queue"],
        )
        levels = ["cluster_queue", "flavor", "resource"]
        usage = GaugeMetricFamily(
            "ignara_cluster_queue_resource_usage",
            "What a cluster queue's admitted workloads hold (GPUs, cores, bytes; hours "
            "for a budget)",
            labels=levels,
        )
        nominal = GaugeMetricFamily(
            "ignara_cluster_queue_nominal_quota", "A cluster queue's nominal quota", labels=levels
        )
        borrowing = GaugeMetricFamily(
            "ignara_cluster_queue_borrowing",
            "What a cluster queue uses beyond its nominal quota, borrowed from its cohort",
            labels=levels,
        )
        lending = GaugeMetricFamily(
            "ignara_cluster_queue_lending",
            "What a cluster queue's unused quota lends to others in its cohort",
            labels=levels,
        )
        summary = self.summary
        if summary is not None:
            for name, queue in summary.queues.items():
                closed = summary.inadmissible.get(name, 0)
                pending.add_metric([name, "active"], queue.pending - closed)
                pending.add_metric([name, "inadmissible"], closed)
                admitted.add_metric([name], queue.admitted)
                for level in queue.levels:
                    labels = [name, level.flavor, level.resource]
                    usage.add_metric(labels, amount(level.resource, level.usage))
                    nominal.add_metric(labels, amount(level.resource, level.nominal))
                    borrowing.add_metric(labels, amount(level.resource, level.borrowed))
                    lending.add_metric(labels, amount(level.resource, level.lent))
        return (pending, admitted, usage, nominal, borrowing, lending)


class GatewayMetrics:
    """Every series of one gateway app, and the children the hot path observes through."""

    def __init__(self, *, multiproc_dir: str | None = None) -> None:
        self.multiproc_dir = multiproc_dir
        self.registry = registry = CollectorRegistry()
        self._live = _LiveCollector()
        if multiproc_dir is None:
            registry.register(self._live)
        # -- HTTP, Litestar's routes and the inference front alike
        self.http_requests = Counter(
            "ignara_http_requests",
            "HTTP requests answered, by route template, method and status",
            ["route", "method", "status"],
            registry=registry,
        )
        self.http_duration = Histogram(
            "ignara_http_request_duration_seconds",
            "Time to answer an HTTP request (a stream: until it ends)",
            ["route", "method"],
            buckets=_HTTP,
            registry=registry,
        )
        # -- inference
        self.upstream_duration = Histogram(
            "ignara_upstream_request_duration_seconds",
            "Time until an upstream's response headers, by model and endpoint",
            ["model", "endpoint"],
            buckets=_UPSTREAM,
            registry=registry,
        )
        self.upstream_errors = Counter(
            "ignara_upstream_errors",
            "Upstream calls that failed (code: the gateway's error code, or the "
            "upstream's HTTP status class)",
            ["model", "endpoint", "code"],
            registry=registry,
        )
        self.first_token = Histogram(
            "ignara_time_to_first_token_seconds",
            "From a streamed call's arrival to its first chunk from the upstream",
            ["model"],
            buckets=_UPSTREAM,
            registry=registry,
        )
        self.tokens = Counter(
            "ignara_tokens",
            "Tokens charged, by tenant, queue, model and direction (input, output)",
            ["tenant", "queue", "model", "direction"],
            registry=registry,
        )
        self.rate_limited = Counter(
            "ignara_rate_limited",
            "Calls refused with 429, by the level refusing (ClusterQueue, Cohort) and resource",
            ["level", "resource"],
            registry=registry,
        )
        self.ledger_duration = Histogram(
            "ignara_ledger_round_trip_seconds",
            "One call to the token ledger (Redis, or in process), by operation",
            ["operation"],
            buckets=_FAST,
            registry=registry,
        )
        self.policy_duration = Histogram(
            "ignara_policy_decision_duration_seconds",
            "One policy decision (cached decisions are not counted)",
            ["decision"],
            buckets=_FAST,
            registry=registry,
        )
        # -- admission (Kueue's vocabulary)
        self.admission_wait = Histogram(
            "ignara_admission_wait_time_seconds",
            "From a workload's submission to its admission, per cluster queue",
            ["cluster_queue"],
            buckets=_WAIT,
            registry=registry,
        )
        self.admission_cycle = Histogram(
            "ignara_admission_cycle_duration_seconds",
            "One admission pass of the leader: read, decide, write",
            buckets=_CYCLE,
            registry=registry,
        )
        self.admitted = Counter(
            "ignara_admitted_workloads",
            "Workloads admitted, per cluster queue",
            ["cluster_queue"],
            registry=registry,
        )
        self.preempted = Counter(
            "ignara_preempted_workloads",
            "Workloads preempted, per cluster queue (the victim's) and reason",
            ["cluster_queue", "reason"],
            registry=registry,
        )
        self.leader = Gauge(
            "ignara_admission_leader",
            "1 while this process runs the admission loop",
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.leader.set(0)
        self._http: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        self._endpoints: dict[str, str] = {}
        self._upstream: dict[tuple[str, str], Histogram] = {}
        self._first: dict[str, Histogram] = {}
        self._tokens: dict[tuple[str, str, str], tuple[Counter, Counter]] = {}
        self.ledger_reserve = self.ledger_duration.labels("reserve")
        self.ledger_settle = self.ledger_duration.labels("settle")

    # -- observing ------------------------------------------------------------------------

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        children = self._http.get(key)
        if children is None:
            children = self._http[key] = (
                self.http_requests.labels(route, method, str(status)),
                self.http_duration.labels(route, method),
            )
        children[0].inc()
        children[1].observe(seconds)

    def endpoint(self, base_url: str | None) -> str:
        if base_url is None:
            return "none"
        label = self._endpoints.get(base_url)
        if label is None:
            label = self._endpoints[base_url] = endpoint_label(base_url)
        return label

    def upstream(self, model: str, base_url: str, seconds: float) -> None:
        key = (model, base_url)
        child = self._upstream.get(key)
        if child is None:
            child = self._upstream[key] = self.upstream_duration.labels(
                model, self.endpoint(base_url)
            )
        child.observe(seconds)

    def upstream_error(self, model: str, base_url: str | None, code: str) -> None:
        self.upstream_errors.labels(model, self.endpoint(base_url), code).inc()

    def time_to_first_token(self, model: str, seconds: float) -> None:
        child = self._first.get(model)
        if child is None:
            child = self._first[model] = self.first_token.labels(model)
        child.observe(seconds)

    def charged(self, tenant: str, queue: str, model: str, prompt: int, completion: int) -> None:
        key = (tenant, queue, model)
        children = self._tokens.get(key)
        if children is None:
            children = self._tokens[key] = (
                self.tokens.labels(tenant, queue, model, "input"),
                self.tokens.labels(tenant, queue, model, "output"),
            )
        children[0].inc(prompt)
        children[1].inc(completion)

    # -- scraping -------------------------------------------------------------------------

    def render(self, summary: LiveSummary | None) -> bytes:
        """The text exposition of every series, the quota gauges from ``summary``."""
        self._live.summary = summary
        try:
            if self.multiproc_dir is None:
                return generate_latest(self.registry)
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=self.multiproc_dir)  # type: ignore[no-untyped-call]
            registry.register(self._live)
            return generate_latest(registry)
        finally:
            self._live.summary = None
