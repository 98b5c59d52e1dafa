"""OpenAI-compatible inference: the model registry and the upstream client."""

from __future__ import annotations

from gateway.inference.balancer import Balancer, SmoothWeightedBalancer, WeightedRandomBalancer
from gateway.inference.errors import (
    RegistryError,
    UpstreamError,
    UpstreamStreamBroken,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.inference.health import HealthChecker
from gateway.inference.registry import Endpoint, ModelRegistry, ModelRoute
from gateway.inference.upstreams import (
    ChunkStream,
    SessionFactory,
    Timeouts,
    UpstreamClient,
    UpstreamResponse,
    default_session,
)

__all__ = [
    "Balancer",
    "ChunkStream",
    "Endpoint",
    "HealthChecker",
    "ModelRegistry",
    "ModelRoute",
    "RegistryError",
    "SessionFactory",
    "SmoothWeightedBalancer",
    "Timeouts",
    "UpstreamClient",
    "UpstreamError",
    "UpstreamResponse",
    "UpstreamStreamBroken",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "WeightedRandomBalancer",
    "default_session",
]
