"""Endpoint order for one call: the first pick by weight, then the rest as fallbacks."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

from gateway.inference.registry import Endpoint, ModelRoute

__all__ = ["Balancer", "SmoothWeightedBalancer", "WeightedRandomBalancer"]


class Balancer(Protocol):
    """Orders a route's candidate endpoints; the first is tried first, the rest on retry."""

    def order(self, route: ModelRoute, candidates: Sequence[Endpoint]) -> list[Endpoint]: ...


class SmoothWeightedBalancer:
    """Nginx's smooth weighted round robin, per model.

    Weights 3:1 give the sequence a, a, b, a (interleaved, never bursts). Fallbacks follow
    the pick in declaration order, wrapping around.
    """

    def __init__(self) -> None:
        self._current: dict[str, dict[str, int]] = {}

    def order(self, route: ModelRoute, candidates: Sequence[Endpoint]) -> list[Endpoint]:
        if len(candidates) <= 1:
            return list(candidates)
        current = self._current.setdefault(route.model, {})
        total = 0
        best = 0
        best_value = -(2**62)
        for index, endpoint in enumerate(candidates):
            value = current.get(endpoint.base_url, 0) + endpoint.weight
            current[endpoint.base_url] = value
            total += endpoint.weight
            if value > best_value:
                best, best_value = index, value
        current[candidates[best].base_url] = best_value - total
        return [*candidates[best:], *candidates[:best]]


class WeightedRandomBalancer:
    """Weighted random order without replacement; pass a seeded ``random.Random`` in tests."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def order(self, route: ModelRoute, candidates: Sequence[Endpoint]) -> list[Endpoint]:
        pool = list(candidates)
        ordered: list[Endpoint] = []
        while pool:
            total = sum(endpoint.weight for endpoint in pool)
            point = self._rng.uniform(0, total)
            for index, endpoint in enumerate(pool):
                point -= endpoint.weight
                if point <= 0 or index == len(pool) - 1:
                    ordered.append(pool.pop(index))
                    break
        return ordered
