"""The shared ledger: the same arithmetic as :mod:`quota.ledger`, kept in Redis.

Every replica runs the same Lua scripts, one round trip per call (EVALSHA through
redis-py's ``register_script``, which falls back to EVAL-loading on NOSCRIPT), and
a script runs atomically, so however many replicas race, each reservation sees
the usage every earlier one left. The key layout is described in
``lua/common.lua``; every key carries the hash tag ``{prefix}``.

Only usage lives in Redis. The static part of the tree (each node on a queue's
path with its guaranteed quota, subtree quota and borrowing limit) comes from the
quota configuration in Python, is cached per (queue, flavor, resources) and sent
with each call; :meth:`RedisLedger.update_config` replaces it and re-charges
what is live into the new tree.

Times are the callers' clocks (``now``): replicas should agree to well under a
second (NTP). Key TTLs are only a safety net and are relative, so the Redis
server's clock does not matter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from gateway.ledgers.base import (
    Grant,
    Refusal,
    UnknownQueueError,
    check_actual,
    check_amounts,
    clock,
    to_milli,
    to_units,
)
from quota.cache import ClusterState
from quota.ledger import BUDGET_RESOURCES, RATE_RESOURCES, RETRY_WALK_LIMIT, period_end
from quota.model import QuotaConfig, iter_quotas
from quota.resources import FlavorResource
from quota.tree import ResourceNode, path_to_root, potential_available

__all__ = ["RedisLedger"]

# How long every key outlives what it holds, in seconds: a safety net only (scripts
# delete what they are done with), generous enough for clock skew between replicas.
KEY_MARGIN_SECONDS = 3600


def _script(name: str) -> str:
    lua = files("gateway.ledgers") / "lua"
    return (lua / "common.lua").read_text() + "\n" + (lua / f"{name}.lua").read_text()


@dataclass(frozen=True, slots=True)
class _Path:
    """The static part of one queue's path for some resources of one flavor."""

    nodes: tuple[str, ...]  # "q:<queue>", then "c:<cohort>" up to the root
    rows: dict[str, tuple[str, ...]]  # resource -> per depth: guaranteed, subtree, limit


class RedisLedger:
    """:class:`~gateway.ledgers.base.Ledger` shared by every replica through Redis.

    Usage::

        ledger = RedisLedger.from_url("redis://localhost:6379/0", config)
        grant = await ledger.reserve("team-a", "llama-pool", {"tokens-per-minute": 900})
    """

    def __init__(
        self,
        client: Redis,
        config: QuotaConfig,
        *,
        prefix: str = "ignara",
        owns_client: bool = False,
    ) -> None:
        if "{" in prefix or "}" in prefix:
            raise ValueError(f"prefix {prefix!r}: braces would break its hash tag")
        self._redis = client
        self._owns_client = owns_client
        self._state = ClusterState.build(config)
        self._paths: dict[tuple[str, str, tuple[str, ...]], _Path] = {}
        self._tag = "{" + prefix + "}"
        self._reserve = client.register_script(_script("reserve"))
        self._reconcile = client.register_script(_script("reconcile"))
        self._usage = client.register_script(_script("usage"))
        self._rebuild = client.register_script(_script("rebuild"))

    @classmethod
    def from_url(cls, url: str, config: QuotaConfig, *, prefix: str = "ignara") -> RedisLedger:
        client = Redis.from_url(url, decode_responses=True)
        return cls(client, config, prefix=prefix, owns_client=True)

    # -- the Ledger protocol --------------------------------------------------------------

    async def reserve(
        self, queue: str, flavor: str, amounts: Mapping[str, int], *, now: float | None = None
    ) -> Grant | Refusal:
        at = clock(now)
        check_amounts(amounts)
        resources = tuple(amounts)
        path = self._path(queue, flavor, resources)
        keys = [f"{self._tag}:seq"]
        args: list[str | int] = [f"{self._tag}:res:", repr(at), queue, flavor]
        args += [len(path.nodes), len(resources), RETRY_WALK_LIMIT, KEY_MARGIN_SECONDS]
        args += path.nodes
        for resource, amount in to_milli(amounts).items():
            expiry = period_end(resource, at)
            keys += self._keys(flavor, resource, expiry)
            args += [resource, amount, repr(expiry), _kind(resource), *path.rows[resource]]
        reply = await self._run(self._reserve, keys, args)
        if int(reply[0]) == 1:
            return Grant(
                id=str(reply[1]),
                queue=queue,
                flavor=flavor,
                amounts=dict(amounts),
                remaining=_remaining(resources, reply[2:]),
                reset_after=_reset_after(resources, reply[2:]),
            )
        return self._refusal(flavor, amounts, resources, reply)

    async def reconcile(
        self, grant: Grant, actual: Mapping[str, int], *, now: float | None = None
    ) -> None:
        at = clock(now)
        used = to_milli(check_actual(grant, actual))
        resources = tuple(grant.amounts)
        keys = [f"{self._tag}:res:{grant.id}"]
        args: list[str | int] = [grant.id, repr(at)]
        path = self._path_if_known(grant.queue, grant.flavor, resources)
        if path is None:  # the queue left the configuration: only settle
            await self._run(self._reconcile, keys, [*args, 0, 0])
            return
        args += [len(path.nodes), len(resources), *path.nodes]
        for resource in resources:
            expiry = period_end(resource, at)
            keys += self._keys(grant.flavor, resource, expiry)
            budget_end = "" if resource in RATE_RESOURCES else repr(expiry)
            actual_arg = str(used[resource]) if resource in used else ""
            args += [resource, actual_arg, _kind(resource), budget_end, *path.rows[resource]]
        await self._run(self._reconcile, keys, args)

    async def release(self, grant: Grant, *, now: float | None = None) -> None:
        await self.reconcile(grant, dict.fromkeys(grant.amounts, 0), now=now)

    def limit(self, queue: str, flavor: str, resource: str) -> int:
        node = self._queue(queue)
        return to_units(max(0, potential_available(node, FlavorResource(flavor, resource))))

    def covers(self, queue: str, flavor: str, resource: str) -> bool:
        node = self._state.queues.get(queue)
        return node is not None and FlavorResource(flavor, resource) in node.quotas

    async def update_config(self, config: QuotaConfig, *, now: float | None = None) -> None:
        at = clock(now)
        old, new = self._state, ClusterState.build(config)
        self._state = new
        self._paths.clear()
        nodes = [*new.queues.values(), *new.cohorts.values()]
        numbers = {id(node): n for n, node in enumerate(nodes, start=1)}
        args: list[str | int] = [repr(at), len(nodes), 0]
        for node in nodes:
            parent = 0 if node.parent is None else numbers[id(node.parent)]
            args += [_field(node, new), parent]
        keys: list[str] = []
        frs = sorted(_budget_and_rate_frs(old) | _budget_and_rate_frs(new))
        for fr in frs:
            keys += self._keys(fr.flavor, fr.resource, period_end(fr.resource, at))
            args += [_kind(fr.resource), *(node.guaranteed.get(fr, 0) for node in nodes)]
        args[2] = len(frs)
        await self._run(self._rebuild, keys, args)

    async def usage(
        self, queue_or_cohort: str, flavor: str, resource: str, *, now: float | None = None
    ) -> int:
        at = clock(now)
        if queue_or_cohort in self._state.queues:
            node = f"q:{queue_or_cohort}"
        elif queue_or_cohort in self._state.cohorts:
            node = f"c:{queue_or_cohort}"
        else:
            raise UnknownQueueError(queue_or_cohort)
        keys = self._keys(flavor, resource, period_end(resource, at))
        reply = await self._run(self._usage, keys, [repr(at), node, _kind(resource)])
        return to_units(int(reply))

    async def aclose(self) -> None:
        if self._owns_client:
            await self._redis.aclose()

    # -- internals -------------------------------------------------------------------------

    async def _run(
        self, script: AsyncScript, keys: Sequence[str], args: Sequence[str | int]
    ) -> Any:
        return await script(keys=keys, args=args)

    def _keys(self, flavor: str, resource: str, expiry: float) -> list[str]:
        """The state and expiry keys of a flavor-resource; a budget's state is per period."""
        base = f"{flavor}|{resource}"
        state = f"{self._tag}:fr:{base}"
        if resource not in RATE_RESOURCES:
            state += f"@{int(expiry)}"
        return [state, f"{self._tag}:exp:{base}"]

    def _queue(self, queue: str) -> ResourceNode:
        node = self._state.queues.get(queue)
        if node is None:
            raise UnknownQueueError(queue)
        return node

    def _path_if_known(self, queue: str, flavor: str, resources: tuple[str, ...]) -> _Path | None:
        try:
            return self._path(queue, flavor, resources)
        except UnknownQueueError:
            return None

    def _path(self, queue: str, flavor: str, resources: tuple[str, ...]) -> _Path:
        key = (queue, flavor, resources)
        path = self._paths.get(key)
        if path is None:
            path = self._paths[key] = _static_path(self._queue(queue), flavor, resources)
        return path

    def _refusal(
        self, flavor: str, amounts: Mapping[str, int], resources: tuple[str, ...], reply: list[Any]
    ) -> Refusal:
        resource = resources[int(reply[1]) - 1]
        return Refusal(
            level=str(reply[2]),
            name=str(reply[3]),
            resource=resource,
            flavor=flavor,
            requested=amounts[resource],
            available=to_units(int(reply[4])),
            retry_after=float(reply[5]),
            remaining=_remaining(resources, reply[6:]),
            reset_after=_reset_after(resources, reply[6:]),
        )


def _static_path(queue: ResourceNode, flavor: str, resources: tuple[str, ...]) -> _Path:
    path = path_to_root(queue)
    nodes = tuple(("q:" if depth == 0 else "c:") + node.name for depth, node in enumerate(path))
    rows: dict[str, tuple[str, ...]] = {}
    for resource in resources:
        fr = FlavorResource(flavor, resource)
        row: list[str] = []
        for node in path:
            quota = node.quotas.get(fr)
            limit = None if quota is None else quota.borrowing_limit
            row += [
                str(node.guaranteed.get(fr, 0)),
                str(node.subtree_quota.get(fr, 0)),
                "" if limit is None else str(limit),
            ]
        rows[resource] = tuple(row)
    return _Path(nodes, rows)


def _field(node: ResourceNode, state: ClusterState) -> str:
    return ("q:" if state.queues.get(node.name) is node else "c:") + node.name


def _budget_and_rate_frs(state: ClusterState) -> set[FlavorResource]:
    """Every rate or budget flavor-resource any queue or cohort has a quota for."""
    groups = [q.resource_groups for q in state.config.cluster_queues]
    groups += [c.resource_groups for c in state.config.cohorts]
    return {
        fr for group in groups for fr, _ in iter_quotas(group) if _is_token_resource(fr.resource)
    }


def _is_token_resource(resource: str) -> bool:
    return resource in RATE_RESOURCES or resource in BUDGET_RESOURCES


def _kind(resource: str) -> str:
    return "r" if resource in RATE_RESOURCES else "b"


def _remaining(resources: tuple[str, ...], levels: list[Any]) -> dict[str, int]:
    return {r: to_units(int(levels[2 * i])) for i, r in enumerate(resources)}


def _reset_after(resources: tuple[str, ...], levels: list[Any]) -> dict[str, float]:
    return {r: float(levels[2 * i + 1]) for i, r in enumerate(resources)}
