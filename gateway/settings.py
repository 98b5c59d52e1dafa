"""One settings object; nothing else in Ignara reads the environment."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Self

from gateway.backends.isolation import IsolationSettings


@dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    log_level: str = "info"
    # One log line per request (IGNARA_ACCESS_LOG=1). Off by default: on the inference
    # hot path it costs more than the gateway's own work; usage records keep the account.
    access_log: bool = False
    # The garbage collector's young generation (IGNARA_GC_YOUNG_THRESHOLD; CPython's
    # default is 700): large enough that an admission cycle's objects die young instead
    # of filling the oldest generation; `ignara serve` raises it to 50 per cluster
    # queue configured, at start and at each config load (gateway/process.py).
    gc_young_threshold: int = 50_000
    # Event streams (GET /api/v1/admin/events, the console's live updates) open at once:
    # per tenant, all its keys and sessions together (IGNARA_EVENT_STREAMS_PER_TENANT;
    # platform admins have as many of their own), and for all tenants together
    # (IGNARA_EVENT_STREAMS). Each open stream reads the database twice a second.
    event_streams_per_tenant: int = 8
    event_streams: int = 64


@dataclass(frozen=True)
class DatabaseSettings:
    # SQLite file in the working directory unless DATABASE_URL names a server.
    url: str = "sqlite:///ignara.db"


@dataclass(frozen=True)
class AuthSettings:
    # Bootstrap admin key (IGNARA_ADMIN_KEY): administers a fresh deployment.
    admin_key: str | None = None
    # Server-side secret for API key hashes (IGNARA_KEY_PEPPER); when unset, a random
    # one is kept in ``pepper_file`` so keys survive restarts of a single node.
    pepper: str | None = None
    pepper_file: str = ".ignara-pepper"
    # OIDC bearer tokens, accepted when an issuer is configured (OIDC_ISSUER, ...).
    oidc_issuer: str | None = None
    oidc_audience: str | None = None
    oidc_jwks_uri: str | None = None
    oidc_tenant_claim: str = "tenant"
    oidc_roles_claim: str = "roles"
    # How long a key lookup is trusted before the database is asked again
    # (IGNARA_KEY_CACHE_SECONDS; revocations seen by another replica apply sooner).
    key_cache_seconds: float = 5.0
    # While the database is unavailable, a key this gateway read in the last so many
    # seconds keeps working as it was then (IGNARA_KEY_STALE_SECONDS; 0: none does).
    key_stale_seconds: float = 600.0
    # How long a request waits for a key lookup before the database counts as
    # unavailable for it (IGNARA_KEY_LOOKUP_TIMEOUT): then the last read stands in, or 503.
    key_lookup_timeout: float = 2.0
    # A key unused for so many days is flagged idle (IGNARA_KEY_IDLE_DAYS), and expired
    # where its tenant's policy says so (checked every IGNARA_KEY_EXPIRY_INTERVAL s).
    key_idle_days: int = 30
    key_expiry_interval: float = 3600.0
    # A key is flagged anomalous when today's tokens pass this many times its daily mean
    # (IGNARA_KEY_ANOMALY_FACTOR) and this many tokens (IGNARA_KEY_ANOMALY_FLOOR).
    key_anomaly_factor: float = 10.0
    key_anomaly_floor: int = 10_000


@dataclass(frozen=True)
class VariableRule:
    """Which environment variables an admin's config may name as a secret to send out:
    those starting with ``prefix`` (not the prefix alone) or listed in ``names``. Each
    kind of secret is a subclass naming its default prefix and its two variables."""

    prefix: str = ""
    names: frozenset[str] = frozenset()

    # What the messages call these variables, and the operator's variables that set
    # ``prefix`` and ``names``.
    subject: ClassVar[str]
    allow_list: ClassVar[str]
    prefix_variable: ClassVar[str]
    names_variable: ClassVar[str]

    def allows(self, name: str) -> bool:
        by_prefix = bool(self.prefix) and name.startswith(self.prefix) and name != self.prefix
        return by_prefix or name in self.names

    def describe(self) -> str:
        rules = [f"start with {self.prefix}"] if self.prefix else []
        if self.names:
            rules.append(f"be one of {', '.join(sorted(self.names))}")
        if not rules:
            return f"no variable may be (the operator's allow-list of {self.allow_list} is empty)"
        return (
            f"{self.subject} variables must "
            + " or ".join(rules)
            + f" (the operator's {self.prefix_variable} / {self.names_variable})"
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        names = env.get(cls.names_variable, "")
        return cls(
            prefix=env.get(cls.prefix_variable, cls.prefix).strip(),
            names=frozenset(n.strip() for n in names.split(",") if n.strip()),
        )


@dataclass(frozen=True)
class BackendSecretRule(VariableRule):
    """Which environment variables a backend's ``token_env`` may name.

    The gateway sends that variable's value to the backend's URL, which an admin chooses,
    so only variables starting with ``prefix`` (IGNARA_ALLOWED_BACKEND_SECRET_PREFIX,
    default ``IGNARA_SLURM_``; empty: none by prefix) or listed in ``names``
    (IGNARA_ALLOWED_BACKEND_SECRETS, comma-separated) may be named.
    """

    prefix: str = "IGNARA_SLURM_"

    subject = "backend secret"
    allow_list = "backend secrets"
    prefix_variable = "IGNARA_ALLOWED_BACKEND_SECRET_PREFIX"
    names_variable = "IGNARA_ALLOWED_BACKEND_SECRETS"


@dataclass(frozen=True)
class BackendSettings:
    local_root: str = ".ignara-jobs"  # where the local backend keeps jobs and logs
    # How the local backend isolates jobs (IGNARA_LOCAL_BACKEND_ISOLATION, _UNSAFE, _NETWORK,
    # _UIDS, _MAX_PROCESSES, _READONLY_PATHS, _CGROUP; gateway/backends/isolation.py).
    local_isolation: IsolationSettings = field(default_factory=IsolationSettings)
    # The variables declared backends' ``token_env`` may name, and their values: only what
    # the rule allows is kept, so no other secret of the gateway can be sent to a backend.
    secret_rule: BackendSecretRule = BackendSecretRule()
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)


_POLICIES = Path(__file__).resolve().parents[1] / "policies" / "rego"


@dataclass(frozen=True)
class PolicySettings:
    directory: str = str(_POLICIES)  # the .rego files (tests excluded when loading)
    opa_url: str | None = None  # an OPA server; the embedded engine when unset
    # A decision not made within this (IGNARA_POLICY_TIMEOUT) is a deny (fail closed).
    timeout_seconds: float = 0.5


@dataclass(frozen=True)
class UpstreamKeyRule(VariableRule):
    """Which environment variables a model endpoint's ``api_key_env`` may name.

    The gateway sends that variable's value to the endpoint (as a bearer token, and
    with every health check), so an admin must not be able to name any variable of the
    gateway's environment: only those starting with ``prefix``
    (IGNARA_ALLOWED_UPSTREAM_KEY_PREFIX; empty: none by prefix) or listed in ``names``
    (IGNARA_ALLOWED_UPSTREAM_KEYS, comma-separated).
    """

    prefix: str = "IGNARA_UPSTREAM_KEY_"

    subject = "upstream key"
    allow_list = "upstream keys"
    prefix_variable = "IGNARA_ALLOWED_UPSTREAM_KEY_PREFIX"
    names_variable = "IGNARA_ALLOWED_UPSTREAM_KEYS"


@dataclass(frozen=True)
class AdmissionSettings:
    # IGNARA_ADMISSION_INTERVAL: how often the leader runs an admission pass (and its
    # dispatcher's): the longest a submission waits for the pass that decides on it.
    interval: float = 0.5
    # IGNARA_ESTIMATE_INTERVAL: how often the leader recomputes pending workloads'
    # estimated starts (a forecast over every queue: not on every admission pass).
    estimate_interval: float = 5.0
    # IGNARA_MAX_LOST_RUNS: a workload whose backend lost its job this many times (the job
    # vanished, or died with its backend) fails instead of running yet again: a job that
    # takes its backend down with it would otherwise do so for ever.
    max_lost_runs: int = 5


@dataclass(frozen=True)
class InferenceSettings:
    # A Redis shared by every replica holds the token ledger (REDIS_URL); without
    # one, each process keeps its own (right for a single gateway).
    redis_url: str | None = None
    # Keys in that Redis start with this (IGNARA_LEDGER_PREFIX): gateways that must
    # share quotas share a prefix; separate deployments on one Redis do not.
    ledger_prefix: str = "ignara"
    # Connecting to that Redis and each wait for its replies (IGNARA_REDIS_TIMEOUT, s):
    # a frozen or unreachable Redis fails calls (503) within this, never hangs them.
    # ``?socket_timeout=`` / ``?socket_connect_timeout=`` in REDIS_URL win over it.
    redis_timeout: float = 0.5
    # Each gateway holds a lease in that Redis for this long, renewed every third of it
    # (IGNARA_LEASE_SECONDS); once a gateway's lease has expired (it died), the others
    # settle and record its calls in flight, checking every IGNARA_RECLAIM_INTERVAL s.
    lease_seconds: float = 10.0
    reclaim_interval: float = 5.0
    connect_timeout: float = 5.0  # IGNARA_UPSTREAM_CONNECT_TIMEOUT, per endpoint
    first_byte_timeout: float = 60.0  # IGNARA_UPSTREAM_TIMEOUT: until response headers
    total_timeout: float = 600.0  # IGNARA_UPSTREAM_TOTAL_TIMEOUT: the whole call
    health_interval: float = 10.0  # IGNARA_HEALTH_INTERVAL: active endpoint checks
    # Bounds on how far past its quota a queue's under-estimated calls can take it:
    # forward the reserved output bound when a call names none (IGNARA_CAP_OUTPUT);
    # multiply input estimates by what the upstream reported for earlier calls, at
    # most this much (IGNARA_ESTIMATE_MAX_FACTOR; 1 learns nothing); end a stream
    # that writes past its reserved output by this share of it, plus 16 tokens
    # (IGNARA_STREAM_CUT_MARGIN; "off" never cuts).
    cap_output: bool = True
    estimate_max_factor: float = 8.0
    stream_cut_margin: float | None = 0.25
    # The variables ``api_key_env`` may name, and their values: only what the rule
    # allows is kept, so nothing else of the gateway's environment can be sent upstream.
    key_rule: UpstreamKeyRule = UpstreamKeyRule()
    key_env: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class ConsoleSettings:
    # A console session unused this long ends (IGNARA_CONSOLE_IDLE_SECONDS), and
    # however busy, this long after sign-in (IGNARA_CONSOLE_SESSION_SECONDS).
    idle_seconds: float = 30 * 60
    lifetime_seconds: float = 8 * 3600
    # Failed sign-ins allowed per client address and per key in each window
    # (IGNARA_CONSOLE_SIGNIN_FAILURES per IGNARA_CONSOLE_SIGNIN_WINDOW seconds).
    sign_in_failures: int = 5
    sign_in_window: float = 60.0
    # Sign-in through the OIDC issuer of OIDC_ISSUER (authorization code with PKCE),
    # offered when a client id is set (OIDC_CONSOLE_CLIENT_ID; OIDC_CONSOLE_CLIENT_SECRET
    # for a confidential client). The button says "Sign in with <OIDC_CONSOLE_PROVIDER>";
    # the provider sends the browser back to OIDC_CONSOLE_REDIRECT_URI, by default
    # <the URL the console was reached at>/console/oidc/callback.
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = field(default=None, repr=False)
    oidc_provider_name: str = "OIDC"
    oidc_redirect_uri: str | None = None
    oidc_scopes: str = "openid profile email"


@dataclass(frozen=True)
class ObservabilitySettings:
    # Prometheus series at GET /metrics (IGNARA_METRICS=0: none are kept or served).
    metrics: bool = True
    # When set (IGNARA_METRICS_TOKEN), /metrics asks for ``Authorization: Bearer <it>``;
    # unset, it is open, as Prometheus scrapes usually are (keep it off the public port).
    metrics_token: str | None = field(default=None, repr=False)
    # prometheus-client's own variable (PROMETHEUS_MULTIPROC_DIR): with several worker
    # processes, each writes its series there and a scrape adds them up.
    multiproc_dir: str | None = None
    # OpenTelemetry traces over OTLP/HTTP (protobuf) when an endpoint is set
    # (OTEL_EXPORTER_OTLP_ENDPOINT, "/v1/traces" appended; or
    # OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, used as is); unset: no tracer exists at all.
    otlp_traces_endpoint: str | None = None
    otlp_headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    service_name: str = "ignara-gateway"
    # Log lines as JSON objects (IGNARA_LOG_FORMAT=json, the default) or for people
    # ("console"); ``ignara serve`` sets this up for its own process only.
    log_format: str = "json"
    # Access lines carry what the caller sent only when asked (IGNARA_LOG_PROMPTS=1).
    log_prompts: bool = False


@dataclass(frozen=True)
class Settings:
    server: ServerSettings
    database: DatabaseSettings
    auth: AuthSettings
    backends: BackendSettings
    policy: PolicySettings = PolicySettings()
    inference: InferenceSettings = InferenceSettings()
    admission: AdmissionSettings = AdmissionSettings()
    console: ConsoleSettings = ConsoleSettings()
    observability: ObservabilitySettings = ObservabilitySettings()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        return cls(
            server=ServerSettings(
                host=env.get("IGNARA_HOST", ServerSettings.host),
                port=int(env.get("IGNARA_PORT", ServerSettings.port)),
                log_level=env.get("IGNARA_LOG_LEVEL", ServerSettings.log_level),
                access_log=env.get("IGNARA_ACCESS_LOG", "0").lower() in ("1", "true", "yes"),
                gc_young_threshold=_whole(
                    env, "IGNARA_GC_YOUNG_THRESHOLD", ServerSettings.gc_young_threshold
                ),
                event_streams_per_tenant=_whole(
                    env, "IGNARA_EVENT_STREAMS_PER_TENANT", ServerSettings.event_streams_per_tenant
                ),
                event_streams=_whole(env, "IGNARA_EVENT_STREAMS", ServerSettings.event_streams),
            ),
            database=DatabaseSettings(url=env.get("DATABASE_URL", DatabaseSettings.url)),
            auth=AuthSettings(
                admin_key=env.get("IGNARA_ADMIN_KEY") or None,
                pepper=env.get("IGNARA_KEY_PEPPER") or None,
                pepper_file=env.get("IGNARA_KEY_PEPPER_FILE", AuthSettings.pepper_file),
                oidc_issuer=env.get("OIDC_ISSUER") or None,
                oidc_audience=env.get("OIDC_AUDIENCE") or None,
                oidc_jwks_uri=env.get("OIDC_JWKS_URI") or None,
                oidc_tenant_claim=env.get("OIDC_TENANT_CLAIM", AuthSettings.oidc_tenant_claim),
                oidc_roles_claim=env.get("OIDC_ROLES_CLAIM", AuthSettings.oidc_roles_claim),
                key_cache_seconds=_seconds(
                    env, "IGNARA_KEY_CACHE_SECONDS", AuthSettings.key_cache_seconds
                ),
                key_stale_seconds=_seconds(
                    env, "IGNARA_KEY_STALE_SECONDS", AuthSettings.key_stale_seconds
                ),
                key_lookup_timeout=_seconds(
                    env,
                    "IGNARA_KEY_LOOKUP_TIMEOUT",
                    AuthSettings.key_lookup_timeout,
                    positive=True,
                ),
                key_idle_days=_whole(env, "IGNARA_KEY_IDLE_DAYS", AuthSettings.key_idle_days),
                key_expiry_interval=_seconds(
                    env,
                    "IGNARA_KEY_EXPIRY_INTERVAL",
                    AuthSettings.key_expiry_interval,
                    positive=True,
                ),
                key_anomaly_factor=_ratio(
                    env, "IGNARA_KEY_ANOMALY_FACTOR", AuthSettings.key_anomaly_factor
                ),
                key_anomaly_floor=_whole(
                    env, "IGNARA_KEY_ANOMALY_FLOOR", AuthSettings.key_anomaly_floor
                ),
            ),
            backends=BackendSettings(
                local_root=env.get("IGNARA_LOCAL_BACKEND_ROOT", BackendSettings.local_root),
                local_isolation=_local_isolation(env),
                secret_rule=(secrets := BackendSecretRule.from_env(env)),
                secret_env={name: value for name, value in env.items() if secrets.allows(name)},
            ),
            policy=PolicySettings(
                directory=env.get("IGNARA_POLICY_DIR", PolicySettings.directory),
                opa_url=env.get("OPA_URL") or None,
                timeout_seconds=float(
                    env.get("IGNARA_POLICY_TIMEOUT", PolicySettings.timeout_seconds)
                ),
            ),
            inference=InferenceSettings(
                redis_url=env.get("REDIS_URL") or None,
                ledger_prefix=env.get("IGNARA_LEDGER_PREFIX", InferenceSettings.ledger_prefix),
                redis_timeout=_seconds(
                    env, "IGNARA_REDIS_TIMEOUT", InferenceSettings.redis_timeout, positive=True
                ),
                lease_seconds=_seconds(
                    env, "IGNARA_LEASE_SECONDS", InferenceSettings.lease_seconds, positive=True
                ),
                reclaim_interval=_seconds(
                    env,
                    "IGNARA_RECLAIM_INTERVAL",
                    InferenceSettings.reclaim_interval,
                    positive=True,
                ),
                connect_timeout=float(
                    env.get("IGNARA_UPSTREAM_CONNECT_TIMEOUT", InferenceSettings.connect_timeout)
                ),
                first_byte_timeout=float(
                    env.get("IGNARA_UPSTREAM_TIMEOUT", InferenceSettings.first_byte_timeout)
                ),
                total_timeout=float(
                    env.get("IGNARA_UPSTREAM_TOTAL_TIMEOUT", InferenceSettings.total_timeout)
                ),
                health_interval=float(
                    env.get("IGNARA_HEALTH_INTERVAL", InferenceSettings.health_interval)
                ),
                cap_output=_flag(env.get("IGNARA_CAP_OUTPUT", "1")),
                estimate_max_factor=_factor(env, "IGNARA_ESTIMATE_MAX_FACTOR"),
                stream_cut_margin=_margin(env, "IGNARA_STREAM_CUT_MARGIN"),
                key_rule=(rule := UpstreamKeyRule.from_env(env)),
                key_env={name: value for name, value in env.items() if rule.allows(name)},
            ),
            admission=AdmissionSettings(
                interval=_seconds(
                    env, "IGNARA_ADMISSION_INTERVAL", AdmissionSettings.interval, positive=True
                ),
                estimate_interval=_seconds(
                    env,
                    "IGNARA_ESTIMATE_INTERVAL",
                    AdmissionSettings.estimate_interval,
                    positive=True,
                ),
                max_lost_runs=_whole(env, "IGNARA_MAX_LOST_RUNS", AdmissionSettings.max_lost_runs),
            ),
            console=ConsoleSettings(
                idle_seconds=_seconds(
                    env, "IGNARA_CONSOLE_IDLE_SECONDS", ConsoleSettings.idle_seconds, positive=True
                ),
                lifetime_seconds=_seconds(
                    env,
                    "IGNARA_CONSOLE_SESSION_SECONDS",
                    ConsoleSettings.lifetime_seconds,
                    positive=True,
                ),
                sign_in_failures=_whole(
                    env, "IGNARA_CONSOLE_SIGNIN_FAILURES", ConsoleSettings.sign_in_failures
                ),
                sign_in_window=_seconds(
                    env,
                    "IGNARA_CONSOLE_SIGNIN_WINDOW",
                    ConsoleSettings.sign_in_window,
                    positive=True,
                ),
                oidc_client_id=env.get("OIDC_CONSOLE_CLIENT_ID") or None,
                oidc_client_secret=env.get("OIDC_CONSOLE_CLIENT_SECRET") or None,
                oidc_provider_name=(
                    env.get("OIDC_CONSOLE_PROVIDER") or ConsoleSettings.oidc_provider_name
                ),
                oidc_redirect_uri=env.get("OIDC_CONSOLE_REDIRECT_URI") or None,
                oidc_scopes=env.get("OIDC_CONSOLE_SCOPES") or ConsoleSettings.oidc_scopes,
            ),
            observability=_observability(env),
        )


def _seconds(env: Mapping[str, str], name: str, default: float, *, positive: bool = False) -> float:
    """A duration in seconds from ``env[name]``; ``ValueError`` names a bad one."""
    raw = env.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, not {raw!r}") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(
            f"{name} must be a {'positive' if positive else 'non-negative'} "
            f"number of seconds, not {raw!r}"
        )
    return value


def _ratio(env: Mapping[str, str], name: str, default: float) -> float:
    """A number above 1 from ``env[name]``; ``ValueError`` names a bad one."""
    raw = env.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 1:
        raise ValueError(f"{name} must be a number above 1, not {raw!r}")
    return value


def _whole(env: Mapping[str, str], name: str, default: int) -> int:
    """A positive whole number from ``env[name]``; ``ValueError`` names a bad one."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{name} must be a positive whole number, not {raw!r}")
    return int(raw)


def _factor(env: Mapping[str, str], name: str) -> float:
    raw = env.get(name, "").strip()
    try:
        value = float(raw) if raw else InferenceSettings.estimate_max_factor
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 1 <= value <= 100:
        raise ValueError(f"{name} must be a number from 1 to 100, not {raw!r}")
    return value


def _margin(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name, "").strip().lower()
    if raw == "off":
        return None
    try:
        value = float(raw) if raw else InferenceSettings.stream_cut_margin
    except ValueError:
        value = math.nan
    if value is None or not math.isfinite(value) or not 0 <= value <= 100:
        raise ValueError(f'{name} must be a share from 0 to 100, or "off", not {raw!r}')
    return value


def _observability(env: Mapping[str, str]) -> ObservabilitySettings:
    """The metrics, traces and logs settings; ``ValueError`` names a bad variable."""
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if not traces and base:
        traces = base.rstrip("/") + "/v1/traces"
    if _flag(env.get("OTEL_SDK_DISABLED", "0")):
        traces = ""
    protocol = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf").strip()
    if traces and protocol != "http/protobuf":
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf, not {protocol!r}")
    if traces and not traces.startswith(("http://", "https://")):
        raise ValueError(f"the OTLP endpoint must be an http(s) URL, not {traces!r}")
    headers: dict[str, str] = {}
    for pair in env.get("OTEL_EXPORTER_OTLP_HEADERS", "").split(","):
        name, sep, value = pair.partition("=")
        if not pair.strip():
            continue
        if not sep or not name.strip():
            raise ValueError("OTEL_EXPORTER_OTLP_HEADERS must be name=value pairs, comma-separated")
        headers[name.strip().lower()] = value.strip()
    log_format = env.get("IGNARA_LOG_FORMAT", ObservabilitySettings.log_format).strip().lower()
    if log_format not in ("json", "console"):
        raise ValueError(f"IGNARA_LOG_FORMAT must be json or console, not {log_format!r}")
    return ObservabilitySettings(
        metrics=_flag(env.get("IGNARA_METRICS", "1")),
        metrics_token=env.get("IGNARA_METRICS_TOKEN") or None,
        multiproc_dir=env.get("PROMETHEUS_MULTIPROC_DIR") or None,
        otlp_traces_endpoint=traces or None,
        otlp_headers=headers,
        service_name=env.get("OTEL_SERVICE_NAME", "").strip() or ObservabilitySettings.service_name,
        log_format=log_format,
        log_prompts=_flag(env.get("IGNARA_LOG_PROMPTS", "0")),
    )


def _flag(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes")


def _local_isolation(env: Mapping[str, str]) -> IsolationSettings:
    """The local backend's sandbox settings; ``ValueError`` names a bad variable."""
    default = IsolationSettings()
    uids = env.get("IGNARA_LOCAL_BACKEND_UIDS", "")
    first, _, last = uids.partition("-")
    try:
        uid_range = (int(first), int(last)) if uids else default.uids
        max_processes = int(env.get("IGNARA_LOCAL_BACKEND_MAX_PROCESSES", default.max_processes))
    except ValueError:
        raise ValueError(
            "IGNARA_LOCAL_BACKEND_UIDS must be FIRST-LAST and "
            "IGNARA_LOCAL_BACKEND_MAX_PROCESSES a number"
        ) from None
    paths = env.get("IGNARA_LOCAL_BACKEND_READONLY_PATHS", "")
    return IsolationSettings(
        isolation=env.get("IGNARA_LOCAL_BACKEND_ISOLATION", default.isolation).strip().lower(),
        unsafe=_flag(env.get("IGNARA_LOCAL_BACKEND_UNSAFE", "0")),
        network=env.get("IGNARA_LOCAL_BACKEND_NETWORK", default.network).strip().lower(),
        uids=uid_range,
        max_processes=max_processes,
        readonly_paths=tuple(path for path in paths.split(":") if path),
        cgroup=env.get("IGNARA_LOCAL_BACKEND_CGROUP") or None,
    )
