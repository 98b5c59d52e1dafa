"""``ignara.yaml``: the quota vocabulary (``flavors``, ``cohorts``, ``cluster_queues``,
``fair_sharing``) plus ``tenants`` and the queues each may use, ``models``, and the
``backends`` admitted workloads run on.

A backend is declared by name and kind; a flavor may name the backend its admitted work
goes to (``flavors: [{name: h100, backend: hpc}]``), else it goes to ``local``::

    backends:
      - {name: hpc, kind: slurm, url: "http://127.0.0.1:6820", token_env: IGNARA_SLURM_TOKEN,
         user: root, partition: debug, account: "", api_version: v0.0.38}
      - {name: k8s-prod, kind: kubernetes, kubeconfig: /etc/ignara/kubeconfig,
         namespace: training, image: "registry.example/train:1", use_jobset: true,
         flavors: {h100: {node_labels: {gpu: h100}, tolerations: [{key: gpu, effect: NoSchedule}]}}}
      - {name: ray-east, kind: ray, url: "http://127.0.0.1:8265"}
      - {name: local, kind: local}

Secrets are never in the file: ``token_env`` names the environment variable each gateway
reads the token from (only variables the operator allows, see gateway/settings.py).
A Kubernetes backend names a kubeconfig file (read when the backend starts) or
``in_cluster: true`` (the pod's service account), never credentials themselves.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

import msgspec
import yaml
from msgspec import Meta

from quota.config import ClusterQueueDoc, CohortDoc, QuotaDocument, decode, to_quota_config
from quota.errors import ConfigError
from quota.model import QuotaConfig
from quota.periods import BudgetPeriod
from tenants.model_checks import base_url_error, env_name_error, model_name_error
from tenants.models.charge import HOURS_SUFFIX, INPUT_TOKENS, OUTPUT_TOKENS

__all__ = [
    "SLURM_API_VERSIONS",
    "BackendDoc",
    "EndpointDoc",
    "FlavorDoc",
    "IgnaraConfig",
    "InferenceDoc",
    "KubernetesBackendDoc",
    "LimitsDoc",
    "LocalBackendDoc",
    "ModelDoc",
    "PricesDoc",
    "QueueWaitDoc",
    "RayBackendDoc",
    "SlurmBackendDoc",
    "TenantDoc",
    "load_config_file",
    "parse_config",
]

MAX_CONFIG_BYTES = 4 * 1024 * 1024
NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
LOCAL_BACKEND = "local"
# The slurmrestd API versions the Slurm adapter speaks (gateway/backends/slurm/wire.py).
SLURM_API_VERSIONS = ("v0.0.38",)
# A Slurm user, partition or account: what Slurm itself accepts, and nothing a shell or
# a URL could read as more than a name.
_SLURM_WORD = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.-]{0,64}$")]


class LocalBackendDoc(msgspec.Struct, tag="local", tag_field="kind", forbid_unknown_fields=True):
    """The gateway's own sandboxed subprocesses (always there, named ``local``)."""

    name: str = LOCAL_BACKEND


class SlurmBackendDoc(
    msgspec.Struct, tag="slurm", tag_field="kind", forbid_unknown_fields=True, omit_defaults=True
):
    """A Slurm cluster through slurmrestd. ``token_env`` names the variable holding the
    JWT (never the token itself); ``user`` is the Slurm user it is for. Job output goes to
    ``output_dir``, which must exist on the nodes and be readable by the gateway."""

    name: str
    url: Annotated[str, Meta(max_length=2048)]
    token_env: str
    user: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")] = "root"
    partition: _SLURM_WORD = ""  # empty: the cluster's default partition
    account: _SLURM_WORD = ""  # empty: the user's default account
    api_version: str = SLURM_API_VERSIONS[0]
    output_dir: Annotated[str, Meta(min_length=1, max_length=1024)] = "/tmp/ignara-slurm"
    # srun starts one task per pod; "none" runs the command once, in the batch step.
    launcher: Literal["srun", "none"] = "srun"
    timeout_seconds: Annotated[float, Meta(gt=0, le=300)] = 10.0


# Kubernetes' own rules (apimachinery validation): a namespace is a DNS-1123 label; a
# label value is at most 63 of [A-Za-z0-9_.-], starting and ending alphanumeric.
_DNS_LABEL = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
_LABEL_NAME = r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*/)?"
    + _LABEL_NAME
    + "$"
)
_LABEL_VALUE = re.compile(f"^({_LABEL_NAME})?$")


class TolerationDoc(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A pod toleration (core/v1 Toleration), as Kubernetes spells it."""

    key: str = ""
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""
    toleration_seconds: Annotated[int, Meta(ge=0, le=10**9)] | None = None


class KubernetesFlavorDoc(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Where a flavor's pods go on this cluster: node labels to select, taints to tolerate."""

    node_labels: Annotated[dict[str, str], Meta(max_length=32)] = {}
    tolerations: Annotated[list[TolerationDoc], Meta(max_length=32)] = []


class KubernetesBackendDoc(
    msgspec.Struct,
    tag="kubernetes",
    tag_field="kind",
    forbid_unknown_fields=True,
    omit_defaults=True,
):
    """A Kubernetes cluster: exactly one of ``kubeconfig`` (a file on the gateway's host,
    read when the backend starts; ``context`` picks one of its contexts) and
    ``in_cluster: true`` (the gateway's pod service account). Jobs run in ``namespace``
    from ``image``; a gang of several pod sets is a JobSet when ``use_jobset`` (the JobSet
    controller must be installed), one pod set an indexed Job. ``flavors`` maps an
    admitted flavor to its node labels and tolerations."""

    name: str
    namespace: Annotated[str, Meta(pattern=_DNS_LABEL)]
    image: Annotated[str, Meta(min_length=1, max_length=512)]
    kubeconfig: Annotated[str, Meta(min_length=1, max_length=1024)] | None = None
    in_cluster: bool = False
    context: Annotated[str, Meta(min_length=1, max_length=253)] | None = None
    use_jobset: bool = True
    flavors: Annotated[dict[str, KubernetesFlavorDoc], Meta(max_length=64)] = {}
    timeout_seconds: Annotated[float, Meta(gt=0, le=300)] = 10.0
    # How long a finished Job or JobSet stays before Kubernetes deletes it (its
    # ttlSecondsAfterFinished): long enough for the gateway to note its end after an outage.
    ttl_seconds_after_finished: Annotated[int, Meta(ge=0, le=366 * 86400)] = 7 * 86400


class RayBackendDoc(
    msgspec.Struct, tag="ray", tag_field="kind", forbid_unknown_fields=True, omit_defaults=True
):
    """A Ray cluster through its Jobs REST API (the dashboard's address). ``token_env``
    names the variable holding the token when the cluster requires one (Ray's opt-in
    token auth, sent as a bearer token); none by default, as Ray's own default."""

    name: str
    url: Annotated[str, Meta(max_length=2048)]
    token_env: str | None = None
    timeout_seconds: Annotated[float, Meta(gt=0, le=300)] = 10.0


BackendDoc = LocalBackendDoc | SlurmBackendDoc | KubernetesBackendDoc | RayBackendDoc


class FlavorDoc(msgspec.Struct, forbid_unknown_fields=True):
    """A flavor that names the backend its admitted workloads run on."""

    name: str
    backend: str


class LimitsDoc(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    max_pods_per_workload: Annotated[int, Meta(ge=1)] | None = None
    max_gpus_per_workload: Annotated[int, Meta(ge=0)] | None = None
    max_runtime_seconds: Annotated[int, Meta(ge=1)] | None = None


class KeyPolicyDoc(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """What happens to the tenant's idle keys: flagged after ``idle_days`` unused (unset:
    the gateway's IGNARA_KEY_IDLE_DAYS), and expired too when ``expire_idle_keys``."""

    expire_idle_keys: bool = False
    idle_days: Annotated[int, Meta(ge=1, le=3650)] | None = None


class TenantDoc(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    queues: list[str] = []
    display_name: str = ""
    backends: list[str] | None = None  # None: every configured backend
    limits: LimitsDoc | None = None
    models: list[str] | None = None  # None: every model its queues' flavors serve
    key_policy: KeyPolicyDoc | None = None


class EndpointDoc(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One upstream: an OpenAI-compatible base URL; the key is read from ``api_key_env``
    on each gateway, so secrets never enter the config or the database."""

    base_url: Annotated[str, Meta(max_length=2048)]
    api_key_env: str | None = None
    weight: Annotated[int, Meta(ge=1, le=1000)] = 1


class ModelDoc(msgspec.Struct, forbid_unknown_fields=True):
    """A model name clients send, the flavor (model pool) its tokens are charged to,
    and where calls go."""

    name: str
    flavor: str
    endpoints: list[EndpointDoc]


class QueueWaitDoc(msgspec.Struct, forbid_unknown_fields=True):
    """Calls refused by ``queue`` wait up to ``max_wait_seconds`` for capacity."""

    queue: str
    max_wait_seconds: Annotated[float, Meta(gt=0, le=600)]


class InferenceDoc(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    # The completion tokens reserved when a call names no max_tokens.
    default_max_tokens: Annotated[int, Meta(ge=1, le=1_000_000)] = 1024
    # The most one call may reserve (its estimate: input + max_tokens x n); a larger
    # call is refused with a 400 before it reaches the quota.
    max_call_tokens: Annotated[int, Meta(ge=1, le=1_000_000_000)] = 1_000_000
    waiting: list[QueueWaitDoc] = []


MAX_PRICE = Decimal(10**9)
PRICE_DECIMALS = 6


class PricesDoc(msgspec.Struct, forbid_unknown_fields=True):
    """What the chargeback reports turn amounts into money with: per flavor, the price
    of one unit of each charged resource in ``currency`` (an ISO 4217 code): an hour of
    a ``<resource>-hours`` resource, a million ``input-tokens`` or ``output-tokens``.
    Prices are numbers or decimal strings, at most 6 decimals::

        prices:
          currency: USD
          flavors:
            h100: {nvidia.com/gpu-hours: 2.50}
            llama-pool: {input-tokens: "0.15", output-tokens: "0.60"}
    """

    currency: Annotated[str, Meta(pattern=r"^[A-Z]{3}$")] = "USD"
    flavors: Annotated[
        dict[str, Annotated[dict[str, str | int | float], Meta(max_length=64)]],
        Meta(max_length=1024),
    ] = {}


class IgnaraConfig(msgspec.Struct, forbid_unknown_fields=True):
    flavors: list[str | FlavorDoc] = []
    cohorts: list[CohortDoc] = []
    cluster_queues: list[ClusterQueueDoc] = []
    fair_sharing: bool = False
    budget_period: BudgetPeriod = BudgetPeriod.MONTH  # what GPU-hour budgets are granted for
    tenants: list[TenantDoc] = []
    models: list[ModelDoc] = []
    inference: InferenceDoc = msgspec.field(default_factory=InferenceDoc)
    backends: list[BackendDoc] = []
    prices: PricesDoc | None = None  # None: reports give amounts only

    @property
    def flavor_names(self) -> list[str]:
        return [f if isinstance(f, str) else f.name for f in self.flavors]

    @property
    def flavor_backends(self) -> dict[str, str]:
        """Flavor -> the backend its admitted work goes to (flavors naming none: absent)."""
        return {f.name: f.backend for f in self.flavors if isinstance(f, FlavorDoc)}

    def quota_document(self) -> QuotaDocument:
        return QuotaDocument(
            flavors=self.flavor_names,
            cohorts=self.cohorts,
            cluster_queues=self.cluster_queues,
            fair_sharing=self.fair_sharing,
            budget_period=self.budget_period,
        )

    def quota_config(self) -> QuotaConfig:
        return to_quota_config(self.quota_document())


def parse_config(data: Any) -> IgnaraConfig:
    """Check a parsed config document; raises :class:`ConfigError` naming the field."""
    if not isinstance(data, dict):
        raise ConfigError("(top level): the config is a mapping with flavors, cluster_queues, ...")
    config = decode(data, IgnaraConfig)
    config.quota_config()  # every quota check: flavors, groups, quantities, cycles
    _check_names(config)
    return config


def load_config_file(path: str | Path) -> IgnaraConfig:
    file = Path(path)
    try:
        if file.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{file}: larger than {MAX_CONFIG_BYTES // 2**20} MiB")
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"{file}: cannot read it ({err.strerror or err})") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{file}: not valid YAML ({getattr(err, 'problem', err)})") from None
    return parse_config(data)


def _check_names(config: IgnaraConfig) -> None:
    pattern = re.compile(NAME_PATTERN)
    sections: list[tuple[str, list[str]]] = [
        ("flavors", config.flavor_names),
        ("cohorts", [c.name for c in config.cohorts]),
        ("cluster_queues", [q.name for q in config.cluster_queues]),
        ("tenants", [t.name for t in config.tenants]),
    ]
    for section, names in sections:
        for i, name in enumerate(names):
            if not pattern.match(name):
                raise ConfigError(
                    f"{section}[{i}]: {name!r} is not a valid name "
                    "(lower-case letters, digits and '-', at most 63 characters)"
                )
    queues = {q.name for q in config.cluster_queues}
    seen: set[str] = set()
    for i, tenant in enumerate(config.tenants):
        if tenant.name in seen:
            raise ConfigError(f"tenants[{i}].name: {tenant.name!r} is listed twice")
        seen.add(tenant.name)
        for j, queue in enumerate(tenant.queues):
            if queue not in queues:
                raise ConfigError(f"tenants[{i}].queues[{j}]: unknown cluster queue {queue!r}")
    _check_models(config, queues)
    _check_backends(config)
    if config.prices is not None:
        config.prices = _checked_prices(config.prices, set(config.flavor_names))


def _check_models(config: IgnaraConfig, queues: set[str]) -> None:
    flavors = set(config.flavor_names)
    models: set[str] = set()
    for i, model in enumerate(config.models):
        if model.name in models:
            raise ConfigError(f"models[{i}].name: {model.name!r} is listed twice")
        models.add(model.name)
        if model.flavor not in flavors:
            raise ConfigError(f"models[{i}].flavor: unknown flavor {model.flavor!r}")
        _check_model(i, model)
    for i, tenant in enumerate(config.tenants):
        for j, name in enumerate(tenant.models or []):
            if name not in models:
                raise ConfigError(f"tenants[{i}].models[{j}]: unknown model {name!r}")
    waiting: set[str] = set()
    for i, wait in enumerate(config.inference.waiting):
        if wait.queue in waiting:
            raise ConfigError(f"inference.waiting[{i}].queue: {wait.queue!r} is listed twice")
        waiting.add(wait.queue)
        if wait.queue not in queues:
            raise ConfigError(f"inference.waiting[{i}].queue: unknown cluster queue {wait.queue!r}")


def _check_model(i: int, model: ModelDoc) -> None:
    if (error := model_name_error(model.name)) is not None:
        raise ConfigError(f"models[{i}].name: {error}")
    if not model.endpoints:
        raise ConfigError(f"models[{i}].endpoints: name at least one upstream endpoint")
    urls: set[str] = set()
    for j, endpoint in enumerate(model.endpoints):
        where = f"models[{i}].endpoints[{j}]"
        if (error := base_url_error(endpoint.base_url)) is not None:
            raise ConfigError(f"{where}.base_url: {error}")
        if endpoint.base_url.rstrip("/") in urls:
            raise ConfigError(f"{where}.base_url: listed twice for this model")
        urls.add(endpoint.base_url.rstrip("/"))
        if endpoint.api_key_env is not None and (error := env_name_error(endpoint.api_key_env)):
            raise ConfigError(f"{where}.api_key_env: {error}")


def _check_backends(config: IgnaraConfig) -> None:
    pattern = re.compile(NAME_PATTERN)
    names = {LOCAL_BACKEND}
    for i, backend in enumerate(config.backends):
        where = f"backends[{i}]"
        if not pattern.match(backend.name):
            raise ConfigError(
                f"{where}.name: {backend.name!r} is not a valid name "
                "(lower-case letters, digits and '-', at most 63 characters)"
            )
        if isinstance(backend, LocalBackendDoc):
            if backend.name != LOCAL_BACKEND:
                raise ConfigError(f"{where}.name: the local backend is named {LOCAL_BACKEND!r}")
        else:
            if backend.name == LOCAL_BACKEND or backend.name in names:
                raise ConfigError(f"{where}.name: {backend.name!r} is listed twice or taken")
            if isinstance(backend, SlurmBackendDoc):
                _check_slurm(where, backend)
            elif isinstance(backend, RayBackendDoc):
                _check_ray(where, backend)
            else:
                _check_kubernetes(where, backend, set(config.flavor_names))
        names.add(backend.name)
    if len([b for b in config.backends if isinstance(b, LocalBackendDoc)]) > 1:
        raise ConfigError("backends: the local backend is listed twice")
    for i, flavor in enumerate(config.flavors):
        if isinstance(flavor, FlavorDoc) and flavor.backend not in names:
            raise ConfigError(
                f"flavors[{i}].backend: unknown backend {flavor.backend!r} "
                f"(declared: {', '.join(sorted(names))})"
            )


def _check_slurm(where: str, backend: SlurmBackendDoc) -> None:
    if (error := base_url_error(backend.url)) is not None:
        raise ConfigError(f"{where}.url: {error.replace('base_url', 'url')}")
    if env_name_error(backend.token_env) is not None:
        raise ConfigError(f"{where}.token_env: invalid variable name {backend.token_env!r}")
    if backend.api_version not in SLURM_API_VERSIONS:
        raise ConfigError(
            f"{where}.api_version: {backend.api_version!r} is not spoken here "
            f"(supported: {', '.join(SLURM_API_VERSIONS)})"
        )
    path = PurePosixPath(backend.output_dir)
    if not path.is_absolute() or ".." in path.parts or "\0" in backend.output_dir:
        raise ConfigError(f"{where}.output_dir: must be an absolute path without '..'")


def _check_kubernetes(where: str, backend: KubernetesBackendDoc, flavors: set[str]) -> None:
    if (backend.kubeconfig is None) == (not backend.in_cluster):
        raise ConfigError(
            f"{where}.kubeconfig: give exactly one of kubeconfig (a file path) and in_cluster: true"
        )
    if backend.kubeconfig is not None:
        path = PurePosixPath(backend.kubeconfig)
        if not path.is_absolute() or ".." in path.parts or "\0" in backend.kubeconfig:
            raise ConfigError(f"{where}.kubeconfig: must be an absolute path without '..'")
    elif backend.context is not None:
        raise ConfigError(f"{where}.context: a context is chosen only from a kubeconfig")
    if any(c.isspace() or c == "\0" for c in backend.image):
        raise ConfigError(f"{where}.image: an image reference has no spaces or NUL bytes")
    for flavor, placement in backend.flavors.items():
        at = f"{where}.flavors.{flavor}"
        if flavor not in flavors:
            raise ConfigError(f"{at}: unknown flavor {flavor[:80]!r}")
        _check_placement(at, placement)


def _check_placement(at: str, placement: KubernetesFlavorDoc) -> None:
    for key, value in placement.node_labels.items():
        if len(key) > 316 or not _LABEL_KEY.match(key):
            raise ConfigError(f"{at}.node_labels: {key[:80]!r} is not a Kubernetes label key")
        if not _LABEL_VALUE.match(value):
            raise ConfigError(
                f"{at}.node_labels.{key}: {value[:80]!r} is not a Kubernetes label value"
            )
    for j, toleration in enumerate(placement.tolerations):
        if toleration.key and (len(toleration.key) > 316 or not _LABEL_KEY.match(toleration.key)):
            raise ConfigError(f"{at}.tolerations[{j}].key: not a Kubernetes label key")
        if toleration.operator == "Exists" and toleration.value:
            raise ConfigError(f"{at}.tolerations[{j}].value: must be empty with Exists")
        if not toleration.key and toleration.operator != "Exists":
            raise ConfigError(f"{at}.tolerations[{j}].operator: an empty key needs Exists")
        if not _LABEL_VALUE.match(toleration.value):
            raise ConfigError(f"{at}.tolerations[{j}].value: not a Kubernetes label value")
        if toleration.toleration_seconds is not None and toleration.effect != "NoExecute":
            raise ConfigError(
                f"{at}.tolerations[{j}].toleration_seconds: only with effect NoExecute"
            )


def _check_ray(where: str, backend: RayBackendDoc) -> None:
    if (error := base_url_error(backend.url)) is not None:
        raise ConfigError(f"{where}.url: {error.replace('base_url', 'url')}")
    if backend.token_env is not None and env_name_error(backend.token_env) is not None:
        raise ConfigError(f"{where}.token_env: invalid variable name {backend.token_env!r}")


def _checked_prices(prices: PricesDoc, flavors: set[str]) -> PricesDoc:
    """``prices`` with each price as its canonical decimal string ("2.5" for 2.50), so
    a file and its export compare equal; raises :class:`ConfigError` naming the field."""
    canonical: dict[str, dict[str, str | int | float]] = {}
    for flavor, rates in prices.flavors.items():
        where = f"prices.flavors.{flavor[:80]}"
        if flavor not in flavors:
            raise ConfigError(f"{where}: unknown flavor {flavor[:80]!r}")
        canonical[flavor] = {}
        for resource, value in rates.items():
            if not (
                resource in (INPUT_TOKENS, OUTPUT_TOKENS)
                or (resource.endswith(HOURS_SUFFIX) and len(resource) > len(HOURS_SUFFIX))
            ):
                raise ConfigError(
                    f"{where}.{resource[:80]}: not a charged resource "
                    f"(a <resource>{HOURS_SUFFIX} such as nvidia.com/gpu-hours, "
                    f"{INPUT_TOKENS} or {OUTPUT_TOKENS})"
                )
            canonical[flavor][resource] = _price(f"{where}.{resource}", value)
    return PricesDoc(currency=prices.currency, flavors=canonical)


def _price(where: str, value: str | int | float) -> str:
    try:
        price = Decimal(str(value).strip())
    except InvalidOperation:
        raise ConfigError(f"{where}: {str(value)[:40]!r} is not a number") from None
    if not price.is_finite() or not 0 <= price <= MAX_PRICE:
        raise ConfigError(f"{where}: a price is from 0 to {MAX_PRICE}")
    exponent = price.normalize().as_tuple().exponent
    if isinstance(exponent, int) and exponent < -PRICE_DECIMALS:
        raise ConfigError(f"{where}: at most {PRICE_DECIMALS} decimals")
    return format(price.normalize(), "f")
