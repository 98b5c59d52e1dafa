"""The model registry: model name -> flavor (model pool) and weighted upstream endpoints."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.inference.errors import RegistryError
from tenants.model_checks import base_url_error, env_name_error, model_name_error

__all__ = ["Endpoint", "ModelRegistry", "ModelRoute"]

_FLAVOR_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_MODEL_KEYS = frozenset({"name", "flavor", "endpoints"})
_ENDPOINT_KEYS = frozenset({"base_url", "api_key_env", "weight"})


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One upstream base URL (e.g. ``http://10.0.0.5:8000/v1``).

    ``api_key`` is the value of ``api_key_env`` read when the registry was built; it is
    excluded from ``repr`` and comparisons so it never lands in logs.
    """

    base_url: str
    api_key_env: str | None = None
    weight: int = 1
    api_key: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.weight, bool) or not isinstance(self.weight, int) or self.weight < 1:
            raise RegistryError(f"endpoint {self.base_url!r}: weight must be an integer >= 1")


@dataclass(frozen=True, slots=True)
class ModelRoute:
    """Where calls for one model go."""

    model: str
    flavor: str
    endpoints: tuple[Endpoint, ...]


class ModelRegistry:
    """Immutable model -> route table, validated when built.

    Usage::

        registry = ModelRegistry.from_config(
            [{"name": "llama-3-8b", "flavor": "llama-pool",
              "endpoints": [{"base_url": "http://127.0.0.1:9000/v1", "api_key_env": "LLAMA_KEY"}]}],
            environ=settings_environ,
        )
        registry.route("llama-3-8b")
    """

    def __init__(self, routes: Iterable[ModelRoute] = ()) -> None:
        table: dict[str, ModelRoute] = {}
        for route in routes:
            if route.model in table:
                raise RegistryError(f"model {route.model!r} is declared twice")
            table[route.model] = route
        self._routes = table

    @classmethod
    def from_config(
        cls, items: Iterable[Mapping[str, Any]], *, environ: Mapping[str, str]
    ) -> ModelRegistry:
        """Build from config dicts; API keys are read from ``environ`` (the settings' view)."""
        return cls(_parse_model(item, environ) for item in items)

    def route(self, model: str) -> ModelRoute | None:
        return self._routes.get(model)

    def models(self) -> list[str]:
        return sorted(self._routes)

    def routes(self) -> list[ModelRoute]:
        return [self._routes[name] for name in sorted(self._routes)]

    def endpoints(self) -> list[Endpoint]:
        """Every distinct endpoint (by base URL), for health checks."""
        seen: dict[str, Endpoint] = {}
        for route in self._routes.values():
            for endpoint in route.endpoints:
                seen.setdefault(endpoint.base_url, endpoint)
        return list(seen.values())


def _parse_model(item: Mapping[str, Any], environ: Mapping[str, str]) -> ModelRoute:
    if not isinstance(item, Mapping):
        raise RegistryError("each model entry must be a mapping")
    name = item.get("name")
    if (error := model_name_error(name)) is not None:
        raise RegistryError(error)
    assert isinstance(name, str)  # checked just above
    unknown = set(item) - _MODEL_KEYS
    if unknown:
        raise RegistryError(f"model {name!r}: unknown keys {sorted(unknown)}")
    flavor = item.get("flavor")
    if not isinstance(flavor, str) or not _FLAVOR_NAME.match(flavor):
        raise RegistryError(f"model {name!r}: invalid flavor {flavor!r}")
    raw = item.get("endpoints")
    if not isinstance(raw, list | tuple) or not raw:
        raise RegistryError(f"model {name!r}: endpoints must be a non-empty list")
    endpoints = tuple(_parse_endpoint(name, entry, environ) for entry in raw)
    urls = [endpoint.base_url for endpoint in endpoints]
    if len(set(urls)) != len(urls):
        raise RegistryError(f"model {name!r}: duplicate endpoint base_url")
    return ModelRoute(model=name, flavor=flavor, endpoints=endpoints)


def _parse_endpoint(model: str, entry: Any, environ: Mapping[str, str]) -> Endpoint:
    if not isinstance(entry, Mapping):
        raise RegistryError(f"model {model!r}: each endpoint must be a mapping")
    unknown = set(entry) - _ENDPOINT_KEYS
    if unknown:
        raise RegistryError(f"model {model!r}: unknown endpoint keys {sorted(unknown)}")
    base_url = entry.get("base_url")
    if (error := base_url_error(base_url)) is not None:
        raise RegistryError(f"model {model!r}: {error}")
    assert isinstance(base_url, str)  # checked just above
    env_name = entry.get("api_key_env")
    api_key: str | None = None
    if env_name is not None:
        if (error := env_name_error(env_name)) is not None:
            raise RegistryError(f"model {model!r}: {error}")
        api_key = environ.get(env_name)
        if not api_key:
            raise RegistryError(f"model {model!r}: environment variable {env_name} is not set")
    weight = entry.get("weight", 1)
    return Endpoint(
        base_url=base_url.rstrip("/"), api_key_env=env_name, weight=weight, api_key=api_key
    )
