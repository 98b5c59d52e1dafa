"""The shared ledger: the same arithmetic as :mod:`quota.ledger`, kept in Redis.

Every replica runs the same Lua scripts, one EVALSHA per call, and a script runs
atomically, so however many replicas race, each reservation sees the usage every
earlier one left. The calls are pipelined on one connection, those made in the
same tick of the event loop in one write (:mod:`gateway.ledgers.batching`); a
reservation whose caller stopped waiting is given back as soon as its reply
arrives. The key layout is described in ``lua/common.lua``; every key carries the
hash tag ``{prefix}``.

Only usage lives in Redis. The static part of the tree (each node on a queue's
path with its guaranteed quota, subtree quota and borrowing limit) comes from the
quota configuration in Python, is encoded once per (queue, flavor, resources) as
one JSON string (see ``lua/common.lua``) and sent with each call next to the few
items that change (now, amounts, expiries, the grant id); the keys are cached with
it for as long as the budgets' periods last. :meth:`RedisLedger.update_config`
replaces it and re-charges what is live into the new tree.

Redis errors, socket errors and timeouts (also waiting for a free connection of
the pool) come out as :class:`~gateway.ledgers.base.LedgerUnavailableError`.

Times are the callers' clocks (``now``): replicas should agree to well under a
second (NTP). Key TTLs are only a safety net and are relative, so the Redis
server's clock does not matter.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import RedisError
from redis.typing import EncodableT, KeyT

from gateway.ledgers.base import (
    Grant,
    LedgerUnavailableError,
    Refusal,
    UnknownQueueError,
    check_actual,
    check_amounts,
    clock,
    to_units,
)
from gateway.ledgers.batching import LuaScript, ScriptBatcher
from quota.cache import ClusterState
from quota.ledger import (
    BUDGET_RESOURCES,
    RATE_RESOURCES,
    RATE_WINDOW_SECONDS,
    RETRY_WALK_LIMIT,
    period_end,
)
from quota.model import QuotaConfig, iter_quotas
from quota.resources import MILLI, FlavorResource
from quota.tree import ResourceNode, path_to_root, potential_available

__all__ = ["DEFAULT_SOCKET_TIMEOUT", "RedisLedger"]

log = logging.getLogger(__name__)

# How long every key outlives what it holds, in seconds: a safety net only (scripts
# delete what they are done with), generous enough for clock skew between replicas.
KEY_MARGIN_SECONDS = 3600

# A path's cached budget keys are used until this many seconds before the earliest
# period end, and recomputed with quota.ledger.period_end from then on: it reads
# ``now`` to the microsecond (rounding), so right at the end it may already answer
# with the next period.
_PERIOD_EDGE = 0.001

# The static part of a reconcile whose queue left the configuration: only settle.
_SETTLE_ONLY = b'{"n":[],"r":[]}'

_STORE_ERRORS = (RedisError, OSError, TimeoutError)

# Seconds to connect, and to wait for a reply (the Lua scripts take well under a ms).
DEFAULT_SOCKET_TIMEOUT = 0.5


def _script(name: str) -> LuaScript:
    lua = files("gateway.ledgers") / "lua"
    return LuaScript.of((lua / "common.lua").read_text() + "\n" + (lua / f"{name}.lua").read_text())


_RESERVE, _RECONCILE, _USAGE, _REBUILD = map(_script, ("reserve", "reconcile", "usage", "rebuild"))


@dataclass(slots=True)
class _Path:
    """What every call for some resources of one flavor on one queue's path sends."""

    flavor: str
    resources: tuple[str, ...]
    static: bytes  # ARGV[1] of reserve.lua and reconcile.lua (JSON, see lua/common.lua)
    # For ``now`` in [since, until): per resource its state and expiry keys, and its
    # period end (a budget; "" and 0.0 for a rate, whose expiry is now + the window).
    keys: tuple[bytes, ...] = ()
    ends: tuple[str, ...] = ()
    end_times: tuple[float, ...] = ()
    since: float = math.inf
    until: float = -math.inf


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
        self._seq = f"{self._tag}:seq".encode()
        self._batcher = ScriptBatcher(client, preload=(_RESERVE, _RECONCILE, _USAGE, _REBUILD))

    @classmethod
    def from_url(
        cls,
        url: str,
        config: QuotaConfig,
        *,
        prefix: str = "ignara",
        max_connections: int = 4,
        timeout: float | None = 5.0,
        socket_connect_timeout: float | None = DEFAULT_SOCKET_TIMEOUT,
        socket_timeout: float | None = DEFAULT_SOCKET_TIMEOUT,
    ) -> RedisLedger:
        """A ledger on its own pool of at most ``max_connections`` connections.

        Its calls, however many run at once, share one connection of the pool (a
        broken one is replaced while it is given back, so two at most), taken when
        the first call needs it: waiting for it takes up to ``timeout`` seconds (None:
        for ever). ``socket_connect_timeout`` and ``socket_timeout`` (each read, and
        the wait for each reply; None: no limit) bound how long an unreachable or
        frozen server can hold a call: short by default, since every inference call
        waits on the ledger and a refusal (503) at once beats a hang. Options in the
        URL's query string (``?socket_timeout=2``) win over these.
        """
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout,
            socket_connect_timeout=socket_connect_timeout,
            socket_timeout=socket_timeout,
            decode_responses=True,
        )
        return cls(Redis.from_pool(pool), config, prefix=prefix, owns_client=True)

    # -- the Ledger protocol --------------------------------------------------------------

    async def reserve(
        self, queue: str, flavor: str, amounts: Mapping[str, int], *, now: float | None = None
    ) -> Grant | Refusal:
        at = clock(now)
        check_amounts(amounts)
        resources = tuple(amounts)
        path = self._path(queue, flavor, resources)
        if not path.since <= at < path.until:
            self._refresh(path, at)
        rate_end = repr(at + RATE_WINDOW_SECONDS)  # quota.ledger.period_end of a rate
        args: list[EncodableT] = [path.static, repr(at)]
        for amount, end in zip(amounts.values(), path.ends, strict=True):
            args += (amount * MILLI, end or rate_end)
        reply = await self._run(
            _RESERVE,
            (self._seq, *path.keys),
            args,
            orphaned=lambda reply: self._give_back(queue, flavor, amounts, at, reply),
        )
        try:
            if int(reply[0]) == 1:
                return Grant(
                    id=str(reply[1]),
                    queue=queue,
                    flavor=flavor,
                    amounts=dict(amounts),
                    remaining={
                        r: to_units(int(v)) for r, v in zip(resources, reply[2:], strict=True)
                    },
                    reset_after={
                        r: end - at if end else RATE_WINDOW_SECONDS
                        for r, end in zip(resources, path.end_times, strict=True)
                    },
                )
            return self._refusal(flavor, amounts, resources, reply)
        except (LookupError, TypeError, ValueError) as err:
            raise LedgerUnavailableError(f"unexpected reply to a reservation: {reply!r}") from err

    async def reconcile(
        self, grant: Grant, actual: Mapping[str, int], *, now: float | None = None
    ) -> None:
        keys, args = self._settlement(grant, check_actual(grant, actual), now)
        await self._run(_RECONCILE, keys, args)

    async def release(self, grant: Grant, *, now: float | None = None) -> None:
        await self.reconcile(grant, dict.fromkeys(grant.amounts, 0), now=now)

    def limit(self, queue: str, flavor: str, resource: str) -> int:
        node = self._queue(queue)
        return to_units(max(0, potential_available(node, FlavorResource(flavor, resource))))

    def nominal(self, queue: str, flavor: str, resource: str) -> int:
        return to_units(self._queue(queue).quota(FlavorResource(flavor, resource)).nominal)

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
        await self._run(_REBUILD, keys, args)

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
        reply = await self._run(_USAGE, keys, [repr(at), node, _kind(resource)])
        try:
            return to_units(int(reply))
        except (TypeError, ValueError) as err:
            raise LedgerUnavailableError(f"unexpected reply to usage: {reply!r}") from err

    async def ping(self) -> None:
        try:
            await self._redis.ping()
        except _STORE_ERRORS as err:
            raise LedgerUnavailableError(f"{type(err).__name__}: {err}") from err

    @property
    def durable(self) -> bool:
        return True

    async def restore_budgets(
        self,
        spent: Mapping[tuple[str, str, str], int],
        *,
        measured_at: float,
        now: float | None = None,
    ) -> None:
        """Redis keeps the budgets itself: nothing to restore."""

    async def aclose(self) -> None:
        await self._batcher.aclose()
        if self._owns_client:
            try:
                await self._redis.aclose()
            except _STORE_ERRORS as err:
                raise LedgerUnavailableError(f"closing the Redis client: {err}") from err

    # -- internals -------------------------------------------------------------------------

    async def _run(
        self,
        script: LuaScript,
        keys: Sequence[KeyT],
        args: Sequence[EncodableT],
        *,
        orphaned: Callable[[Any], None] | None = None,
    ) -> Any:
        try:
            return await self._batcher.call(script, keys, args, orphaned=orphaned)
        except _STORE_ERRORS as err:
            raise LedgerUnavailableError(f"{type(err).__name__}: {err}") from err

    def _settlement(
        self, grant: Grant, used: Mapping[str, int], now: float | None
    ) -> tuple[Sequence[KeyT], list[EncodableT]]:
        """The keys and arguments of reconcile.lua settling ``grant`` at ``used``."""
        at = clock(now)
        record = f"{self._tag}:res:{grant.id}"
        path = self._path_if_known(grant.queue, grant.flavor, tuple(grant.amounts))
        if path is None:  # the queue left the configuration: only settle
            return (record,), [_SETTLE_ONLY, grant.id, repr(at)]
        if not path.since <= at < path.until:
            self._refresh(path, at)
        args: list[EncodableT] = [path.static, grant.id, repr(at)]
        for resource, end in zip(path.resources, path.ends, strict=True):
            amount = used.get(resource)
            args += ("" if amount is None else amount * MILLI, end)
        return (record, *path.keys), args

    def _give_back(
        self, queue: str, flavor: str, amounts: Mapping[str, int], at: float, reply: Any
    ) -> None:
        """A reservation (made at ``at``) whose caller stopped waiting: release it."""
        if not (isinstance(reply, list) and reply and str(reply[0]) == "1"):
            return  # refused: nothing was taken
        grant = Grant(str(reply[1]), queue, flavor, dict(amounts), {}, {})
        keys, args = self._settlement(grant, dict.fromkeys(amounts, 0), at)
        self._batcher.call(_RECONCILE, keys, args).add_done_callback(_log_failure)

    def _keys(self, flavor: str, resource: str, expiry: float) -> list[str]:
        """The state and expiry keys of a flavor-resource; a budget's state is per period."""
        base = f"{flavor}|{resource}"
        state = f"{self._tag}:fr:{base}"
        if resource not in RATE_RESOURCES:
            state += f"@{int(expiry)}"
        return [state, f"{self._tag}:exp:{base}"]

    def _refresh(self, path: _Path, at: float) -> None:
        """Compute the path's keys and period ends for ``at``, and for how long they hold.

        A rate's keys never change. A budget's hold from ``at`` until its period ends
        (less :data:`_PERIOD_EDGE`): periods are intervals and ``period_end`` grows
        with ``now``, so every ``now`` in between is in the same period as ``at``."""
        keys: list[bytes] = []
        ends: list[float] = []
        since, until = -math.inf, math.inf
        for resource in path.resources:
            if resource in RATE_RESOURCES:
                end = 0.0
            else:
                end = period_end(resource, at)
                since, until = at, min(until, end - _PERIOD_EDGE)
            keys += (key.encode() for key in self._keys(path.flavor, resource, end))
            ends.append(end)
        path.keys, path.since, path.until = tuple(keys), since, until
        path.ends = tuple(repr(end) if end else "" for end in ends)
        path.end_times = tuple(ends)

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
            node = self._queue(queue)
            static = _static_path(node, flavor, resources, f"{self._tag}:res:")
            path = self._paths[key] = _Path(flavor, resources, static)
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
            remaining={r: to_units(int(reply[6 + 2 * i])) for i, r in enumerate(resources)},
            reset_after={r: float(reply[7 + 2 * i]) for i, r in enumerate(resources)},
        )


def _log_failure(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and (err := future.exception()) is not None:
        log.error("cannot give back an abandoned reservation: %s", err)


def _static_path(
    queue: ResourceNode, flavor: str, resources: tuple[str, ...], record_prefix: str
) -> bytes:
    """The JSON of a call's static part (lua/common.lua): one string for every call."""
    path = path_to_root(queue)
    wants: list[dict[str, Any]] = []
    for resource in resources:
        fr = FlavorResource(flavor, resource)
        rows: list[dict[str, int]] = []
        for node in path:
            row = {"g": node.guaranteed.get(fr, 0), "sub": node.subtree_quota.get(fr, 0)}
            quota = node.quotas.get(fr)
            if quota is not None and quota.borrowing_limit is not None:
                row["bl"] = quota.borrowing_limit
            rows.append(row)
        wants.append({"name": resource, "rate": resource in RATE_RESOURCES, "path": rows})
    static = {
        "p": record_prefix,
        "q": queue.name,
        "f": flavor,
        "w": RETRY_WALK_LIMIT,
        "m": KEY_MARGIN_SECONDS,
        "n": [("q:" if depth == 0 else "c:") + node.name for depth, node in enumerate(path)],
        "r": wants,
    }
    return json.dumps(static, ensure_ascii=False, separators=(",", ":")).encode()


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
