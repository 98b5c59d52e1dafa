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

Redis may lose its state (a restart without persistence, an eviction). Then
``{prefix}:epoch`` is missing, and reserve.lua grants nothing: the first replica to
see it takes ``{prefix}:rebuild`` (SET NX with a TTL), charges again what the usage
records say was spent (budgets this day and month, the rates' last minute: its
:class:`~gateway.ledgers.base.SpentSource`), and sets a new random epoch. Calls wait
for that a moment (:data:`REBUILD_WAIT`), else fail closed. Reservation ids carry
the epoch, so an id never names two reservations, and a settle names the queue,
flavor and owner (this ledger) it expects: a grant from before the loss, or of
another replica, settles nothing.

Times are the callers' clocks (``now``): replicas should agree to well under a
second (NTP). Key TTLs are only a safety net and are relative, so the Redis
server's clock does not matter.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import RedisError, ResponseError
from redis.typing import EncodableT, KeyT

from gateway.ledgers.base import (
    Grant,
    KeyCharge,
    LedgerUnavailableError,
    Reclaimed,
    Refusal,
    Spent,
    SpentSource,
    UnknownQueueError,
    check_actual,
    check_amounts,
    check_key,
    clock,
    to_units,
)
from gateway.ledgers.batching import LuaScript, ScriptBatcher
from quota.cache import ClusterState
from quota.ledger import (
    BUDGET_RESOURCES,
    KEY_RESOURCES,
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

# A reservation refused because Redis lost its state (reserve.lua's {-1}).
_LOST = -1

# How long a call waits for the ledger to be rebuilt (by this replica or another)
# before it is refused with LedgerUnavailableError, and how long the rebuild lock
# lasts (a replica that died while rebuilding holds it no longer than this).
REBUILD_WAIT = 2.0
REBUILD_LOCK_SECONDS = 10.0
_REBUILD_POLL = 0.05

# The rebuild's own steps, as scripts on the ledger's one connection (a pool may have
# no other to spare). Finishing sets the new epoch and frees the lock only if the lock
# is still this rebuilder's: had Redis lost its state again meanwhile, the lock would
# be gone, and the epoch must stay missing (so the next call rebuilds again).
_EXISTS = LuaScript.of("return redis.call('EXISTS', KEYS[1])")
_TAKE_LOCK = LuaScript.of(
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0"
)
_CLEAR = LuaScript.of("if #KEYS > 0 then redis.call('DEL', unpack(KEYS)) end return 1")
_FINISH_REBUILD = LuaScript.of(
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
    "redis.call('SET', KEYS[2], ARGV[2]) redis.call('DEL', KEYS[1]) return 1"
)
_DROP_LOCK = LuaScript.of(
    "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end return 1"
)

_STORE_ERRORS = (RedisError, OSError, TimeoutError)

TPM, TPD = KEY_RESOURCES  # what an API key may limit of its own

# Seconds to connect, and to wait for a reply (the Lua scripts take well under a ms).
DEFAULT_SOCKET_TIMEOUT = 0.5


def _script(name: str) -> LuaScript:
    lua = files("gateway.ledgers") / "lua"
    return LuaScript.of((lua / "common.lua").read_text() + "\n" + (lua / f"{name}.lua").read_text())


_RESERVE, _RECONCILE, _USAGE, _REBUILD, _LEASES = map(
    _script, ("reserve", "reconcile", "usage", "rebuild", "leases")
)


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
        owner: str | None = None,
        spent: SpentSource | None = None,
    ) -> None:
        if "{" in prefix or "}" in prefix:
            raise ValueError(f"prefix {prefix!r}: braces would break its hash tag")
        self._redis = client
        self._owns_client = owns_client
        self._state = ClusterState.build(config)
        self._paths: dict[tuple[str, str, tuple[str, ...]], _Path] = {}
        self._tag = "{" + prefix + "}"
        self._seq = f"{self._tag}:seq".encode()
        self._prefix = f"{self._tag}:"
        self._epoch_key = f"{self._tag}:epoch"
        self._lock_key = f"{self._tag}:rebuild"
        # Who this ledger is: every reservation it makes names it, and only it settles them.
        self.owner = owner or secrets.token_hex(8)
        self._spent = spent
        self._rebuilding: asyncio.Task[None] | None = None
        self.rebuilds = 0  # how often this replica rebuilt the ledger
        self.foreign_settles = 0  # settles of a reservation that is not (or no longer) there
        self._batcher = ScriptBatcher(
            client, preload=(_RESERVE, _RECONCILE, _USAGE, _REBUILD, _LEASES)
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        config: QuotaConfig,
        *,
        prefix: str = "ignara",
        owner: str | None = None,
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
        return cls(Redis.from_pool(pool), config, prefix=prefix, owns_client=True, owner=owner)

    # -- the Ledger protocol --------------------------------------------------------------

    async def reserve(
        self,
        queue: str,
        flavor: str,
        amounts: Mapping[str, int],
        *,
        now: float | None = None,
        note: str | None = None,
        key: KeyCharge | None = None,
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
        keys: tuple[KeyT, ...] = (self._seq, *path.keys)
        key_amounts: dict[str, int] = {}
        if key is not None:  # a key without limits adds nothing here
            check_key(key)
            key_amounts = dict(key.amounts)
            key_keys, key_args = self._key_level(key, at)
            keys += key_keys
            args += ("", note or "", *key_args)
        elif note:
            args += ("", note)
        for attempt in range(2):
            reply = await self._run(
                _RESERVE,
                keys,
                args,
                orphaned=lambda reply: self._give_back(
                    queue, flavor, amounts, at, reply, key_amounts
                ),
            )
            if not _lost(reply):
                break
            if attempt == 0:  # Redis lost its state: rebuild (or wait for it), then again
                await self._rebuilt(at)
        else:
            raise LedgerUnavailableError("the ledger lost its state and is being rebuilt")
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
                    owner=self.owner,
                    key_amounts=key_amounts,
                )
            return self._refusal(flavor, amounts, resources, reply, key)
        except (LookupError, TypeError, ValueError) as err:
            raise LedgerUnavailableError(f"unexpected reply to a reservation: {reply!r}") from err

    async def reconcile(
        self, grant: Grant, actual: Mapping[str, int], *, now: float | None = None
    ) -> None:
        keys, args = self._settlement(grant, check_actual(grant, actual), now)
        self._settled(grant, await self._run(_RECONCILE, keys, args))

    async def release(self, grant: Grant, *, now: float | None = None) -> None:
        await self.reconcile(grant, dict.fromkeys(grant.resources, 0), now=now)

    def limit(self, queue: str, flavor: str, resource: str) -> int:
        node = self._queue(queue)
        return to_units(max(0, potential_available(node, FlavorResource(flavor, resource))))

    def nominal(self, queue: str, flavor: str, resource: str) -> int:
        return to_units(self._queue(queue).quota(FlavorResource(flavor, resource)).nominal)

    def covers(self, queue: str, flavor: str, resource: str) -> bool:
        node = self._state.queues.get(queue)
        return node is not None and FlavorResource(flavor, resource) in node.quotas

    async def update_config(self, config: QuotaConfig, *, now: float | None = None) -> None:
        """Adopt ``config``; and if Redis lost its state (at start: a fresh Redis),
        rebuild the ledger now rather than at the first call."""
        at = clock(now)
        await self._adopt(config, at)
        if not int(await self._run(_EXISTS, [self._epoch_key], [])):
            await self._rebuilt(at)

    async def _adopt(self, config: QuotaConfig, at: float) -> None:
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

    async def key_usage(self, key: str, resource: str, *, now: float | None = None) -> int:
        at = clock(now)
        keys = self._key_keys(key, resource, period_end(resource, at))
        reply = await self._run(_USAGE, keys, [repr(at), "k", _kind(resource)])
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

    # -- leases: a dead gateway's reservations ----------------------------------------------

    def checkpoint(self, grant: Grant, tokens: int) -> None:
        args: list[EncodableT] = ["check", self._prefix, max(0, tokens), grant.id, grant.owner]
        # Fire and forget: a lost checkpoint only makes a reclaim less exact.
        self._batcher.call(_LEASES, [], args).add_done_callback(_ignore)

    async def forget(self, ids: Sequence[str]) -> None:
        if ids:
            await self._run(_LEASES, [], ["forget", self._prefix, *ids])

    async def renew_lease(self, seconds: float) -> None:
        ms = max(1, int(seconds * 1000))
        await self._run(_LEASES, [], ["renew", self._prefix, self.owner, ms])

    async def drop_lease(self) -> None:
        await self._run(_LEASES, [], ["drop", self._prefix, self.owner])

    async def reclaim(self, limit: int = 100, after: tuple[str, str] = ("", "")) -> list[Reclaimed]:
        args: list[EncodableT] = ["orphans", self._prefix, limit, self.owner, *after]
        reply = await self._run(_LEASES, [], args)
        try:
            return [_reclaimed(str(owner), str(rid), fields) for owner, rid, fields in reply]
        except (LookupError, TypeError, ValueError) as err:
            raise LedgerUnavailableError(f"unexpected reply to reclaim: {reply!r}") from err

    async def settle_orphan(
        self, orphan: Reclaimed, tokens: int, *, now: float | None = None
    ) -> bool:
        grant = orphan.grant()
        used = {r: 1 if r == "requests-per-minute" else tokens for r in grant.resources}
        keys, args = self._settlement(grant, used, now)
        return str(await self._run(_RECONCILE, keys, args)) == "1"

    async def restore_budgets(
        self,
        spent: Mapping[tuple[str, str, str], int],
        *,
        measured_at: float,
        now: float | None = None,
        keys: Mapping[str, int] | None = None,
    ) -> None:
        """Redis keeps the budgets itself: nothing to restore (unless it loses them:
        see :meth:`restore_from`)."""

    def restore_from(self, spent: SpentSource) -> None:
        """Where to read what was spent when Redis lost its state (the usage records)."""
        self._spent = spent

    async def store_warnings(self) -> list[str]:
        """What is wrong with the Redis server's settings for a ledger, from CONFIG GET:
        no persistence (a restart forgets the budgets until the usage records restore
        them, less what was not yet written) and an eviction policy that may drop
        ledger keys. Empty if all is well or CONFIG is disabled (renamed, ACL)."""
        found: dict[str, str] = {}
        try:
            for name in ("appendonly", "save", "maxmemory-policy"):
                reply = await self._redis.config_get(name)
                found.update({str(k): str(v) for k, v in reply.items()})
        except ResponseError as err:  # CONFIG renamed away or denied: managed Redis
            log.info("cannot read the Redis settings (CONFIG GET: %s); not checked", err)
            return []
        except _STORE_ERRORS as err:
            raise LedgerUnavailableError(f"{type(err).__name__}: {err}") from err
        return _store_warnings(found)

    async def aclose(self) -> None:
        rebuilding = self._rebuilding
        if rebuilding is not None and not rebuilding.done():
            rebuilding.cancel()
            await asyncio.gather(rebuilding, return_exceptions=True)
        await self._batcher.aclose()
        if self._owns_client:
            try:
                await self._redis.aclose()
            except _STORE_ERRORS as err:
                raise LedgerUnavailableError(f"closing the Redis client: {err}") from err

    # -- Redis lost its state: rebuild --------------------------------------------------------

    async def _rebuilt(self, at: float) -> None:
        """Wait until the ledger is rebuilt, by this replica (one rebuild at a time) or
        another; :class:`LedgerUnavailableError` if that takes over :data:`REBUILD_WAIT`."""
        task = self._rebuilding
        if task is None or task.done():
            task = self._rebuilding = asyncio.get_running_loop().create_task(
                self._rebuild(at), name="ignara-ledger-rebuild"
            )
            task.add_done_callback(_log_rebuild_failure)
        try:
            await asyncio.wait_for(asyncio.shield(task), REBUILD_WAIT)
        except TimeoutError:
            raise LedgerUnavailableError("the ledger lost its state and is being rebuilt") from None

    async def _rebuild(self, at: float) -> None:
        """Take the rebuild lock and rebuild, or wait until the replica holding it has
        (its epoch appears), or the lock expires and is taken here."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + REBUILD_LOCK_SECONDS + REBUILD_WAIT
        lock_ms = int(REBUILD_LOCK_SECONDS * 1000)
        while True:
            if int(await self._run(_EXISTS, [self._epoch_key], [])):
                return
            if int(await self._run(_TAKE_LOCK, [self._lock_key], [self.owner, lock_ms])):
                break
            if loop.time() > deadline:
                raise LedgerUnavailableError("another replica holds the rebuild too long")
            await asyncio.sleep(_REBUILD_POLL)
        try:
            await self._restore(at)
        except BaseException:
            await self._run(_DROP_LOCK, [self._lock_key], [self.owner])
            raise

    async def _restore(self, at: float) -> None:
        """Charge what the durable account says was spent, then set a new epoch."""
        if self._spent is None:
            spent = Spent(at)
            log.warning("token ledger: Redis lost its state and nothing can restore it")
        else:
            try:
                spent = await self._spent()
            except Exception as err:  # whatever the store raised: refuse calls, retry later
                raise LedgerUnavailableError(f"cannot read what was spent: {err}") from err
        # The live reservations of the configuration (none, if Redis restarted empty)
        await self._adopt(self._state.config, at)
        budgets = sorted(
            fr for fr in _budget_and_rate_frs(self._state) if fr.resource in BUDGET_RESOURCES
        )
        stale = [
            self._keys(fr.flavor, fr.resource, period_end(fr.resource, at))[0] for fr in budgets
        ]
        stale += [self._key_keys(key, TPD, period_end(TPD, at))[0] for key in spent.keys]
        if stale:  # the usage records are the truth of this period's budgets
            await self._run(_CLEAR, stale, [])
        restored = 0
        for (queue, flavor), amounts, ends in _restorations(self, spent, at):
            path = self._path(queue, flavor, tuple(amounts))
            self._refresh(path, at)
            args: list[EncodableT] = [path.static, repr(at)]
            for resource, amount in amounts.items():
                args += (amount * MILLI, repr(ends[resource]))
            await self._run(_RESERVE, (self._seq, *path.keys), [*args, "restore"])
            restored += sum(amounts.values())
        # The keys' own levels, each charged alone (no queue path) however far past its
        # limits (a key's limits are not the ledger's to know here).
        no_path = json.dumps(
            {
                "p": f"{self._tag}:res:",
                "k": self._prefix,
                "o": self.owner,
                "q": "",
                "f": "",
                "w": RETRY_WALK_LIMIT,
                "m": KEY_MARGIN_SECONDS,
                "n": [],
                "r": [],
            }
        ).encode()
        for key, amounts, ends in _key_restorations(spent, at):
            keys: list[KeyT] = [self._seq]
            args = [no_path, repr(at), "restore", "", key]
            for resource, amount in amounts.items():
                keys += self._key_keys(key, resource, ends[resource])
                args += (resource, _kind(resource), 0, amount * MILLI, repr(ends[resource]))
            await self._run(_RESERVE, keys, args)
            restored += sum(amounts.values())
        epoch = secrets.token_hex(6)
        keys = [self._lock_key, self._epoch_key]
        if not int(await self._run(_FINISH_REBUILD, keys, [self.owner, epoch])):
            raise LedgerUnavailableError("Redis lost its state again during the rebuild")
        self.rebuilds += 1
        # WARNING: outside a first start, Redis lost what it held (a restart without
        # persistence, a flush, an eviction), which the operator should hear of.
        log.warning(
            "token ledger rebuilt in Redis, which held none (a new Redis, or one that lost "
            "its data); charged again %d tokens and requests that the usage records say "
            "were spent (epoch %s)",
            restored,
            epoch,
        )

    def _settled(self, grant: Grant, reply: Any) -> None:
        """Count (and say once) a settle that found no reservation of its own to settle."""
        if str(reply) == "1":
            return
        self.foreign_settles += 1
        if self.foreign_settles == 1:
            why = "another's" if str(reply) == "-1" else "unknown (or settled already)"
            log.warning(
                "token ledger: a settle of reservation %s (queue %s) changed nothing: it is "
                "%s; later ones are only counted",
                grant.id,
                grant.queue,
                why,
            )

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
        self, grant: Grant, used: Mapping[str, int], now: float | None, *, drop: bool = False
    ) -> tuple[Sequence[KeyT], list[EncodableT]]:
        """The keys and arguments of reconcile.lua settling ``grant`` at ``used``;
        ``drop``: delete its record even if it has a note (nobody will record it)."""
        at = clock(now)
        record = f"{self._tag}:res:{grant.id}"
        path = self._path_if_known(grant.queue, grant.flavor, tuple(grant.amounts))
        # Nothing more for a plain settle of a call whose key has no limits.
        tail: list[EncodableT] = ["drop"] if drop else []
        if grant.key_amounts:
            tail = ["drop" if drop else ""]
            for resource in grant.key_amounts:
                amount = used.get(resource)
                tail += (resource, _kind(resource), "" if amount is None else amount * MILLI)
        if path is None:  # the queue left the configuration: only settle
            only = {"q": grant.queue, "f": grant.flavor, "k": self._prefix, "n": [], "r": []}
            args = [json.dumps(only).encode(), grant.id, repr(at), grant.owner, *tail]
            return (record,), args
        if not path.since <= at < path.until:
            self._refresh(path, at)
        args = [path.static, grant.id, repr(at)]
        for resource, end in zip(path.resources, path.ends, strict=True):
            amount = used.get(resource)
            args += ("" if amount is None else amount * MILLI, end)
        args += (grant.owner, *tail)
        return (record, *path.keys), args

    def _key_level(self, key: KeyCharge, at: float) -> tuple[tuple[KeyT, ...], list[EncodableT]]:
        """The KEYS and the ARGV tail of reserve.lua for a call's key level."""
        keys: list[KeyT] = []
        args: list[EncodableT] = [key.key]
        for resource, amount in key.amounts.items():
            end = period_end(resource, at)
            keys += self._key_keys(key.key, resource, end)
            args += (resource, _kind(resource), key.limits[resource] * MILLI, amount * MILLI)
            args.append(repr(end))
        return tuple(keys), args

    def _key_keys(self, key: str, resource: str, expiry: float) -> list[str]:
        """An API key's state and expiry keys of a resource; a budget's state is per period."""
        state = f"{self._tag}:key:{key}|{resource}"
        if resource not in RATE_RESOURCES:
            state += f"@{int(expiry)}"
        return [state, f"{self._tag}:kexp:{key}|{resource}"]

    def _give_back(
        self,
        queue: str,
        flavor: str,
        amounts: Mapping[str, int],
        at: float,
        reply: Any,
        key_amounts: dict[str, int],
    ) -> None:
        """A reservation (made at ``at``) whose caller stopped waiting: release it."""
        if not (isinstance(reply, list) and reply and str(reply[0]) == "1"):
            return  # refused: nothing was taken
        grant = Grant(str(reply[1]), queue, flavor, dict(amounts), {}, {}, self.owner, key_amounts)
        # nobody will record a call nobody waited for
        keys, args = self._settlement(grant, dict.fromkeys(grant.resources, 0), at, drop=True)
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
            static = _static_path(node, flavor, resources, self._tag, self.owner)
            path = self._paths[key] = _Path(flavor, resources, static)
        return path

    def _refusal(
        self,
        flavor: str,
        amounts: Mapping[str, int],
        resources: tuple[str, ...],
        reply: list[Any],
        key: KeyCharge | None,
    ) -> Refusal:
        index = int(reply[1]) - 1
        if index >= len(resources):  # the key's own level: its resources and amounts
            if key is None:
                raise ValueError("a refusal by a key level for a call without one")
            index -= len(resources)
            resources, amounts = tuple(key.amounts), key.amounts
        resource = resources[index]
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


def _ignore(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # retrieved: a lost checkpoint is not worth a log line


def _reclaimed(owner: str, rid: str, fields: list[Any]) -> Reclaimed:
    """A reservation's record (HGETALL's flat list) as a :class:`Reclaimed`."""
    record = {str(fields[i]): str(fields[i + 1]) for i in range(0, len(fields), 2)}
    amounts = {
        name[2:]: to_units(int(value)) for name, value in record.items() if name.startswith("a:")
    }
    key_amounts = {
        name[3:]: to_units(int(value)) for name, value in record.items() if name.startswith("ka:")
    }
    used = [
        to_units(int(value))
        for name, value in record.items()
        if name.startswith("u:") and name[2:] != "requests-per-minute"
    ]
    settled = max(used, default=0) if "d" in record else None
    checkpoint = int(record["t"]) if "t" in record else None
    return Reclaimed(
        rid,
        owner,
        record["q"],
        record["f"],
        amounts,
        record.get("n", ""),
        checkpoint,
        settled,
        key_amounts,
    )


def _lost(reply: Any) -> bool:
    return isinstance(reply, list) and len(reply) == 1 and reply[0] == _LOST


def _log_rebuild_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (err := task.exception()) is not None:
        log.warning("token ledger: cannot rebuild the ledger yet: %s", err)


def _restorations(
    ledger: RedisLedger, spent: Spent, at: float
) -> list[tuple[tuple[str, str], dict[str, int], dict[str, float]]]:
    """Per (queue, flavor): the amounts to charge again and when each stops counting.
    A budget counts if it is of the period ``at`` is in; the last minute's spend is
    charged as one reservation until a minute after the latest call (more cautious
    than the calls' own expiries). Queues, flavors and resources the configuration
    has no quota for are left out."""
    amounts: dict[tuple[str, str], dict[str, int]] = {}
    ends: dict[tuple[str, str], dict[str, float]] = {}

    def add(queue: str, flavor: str, resource: str, amount: int, end: float) -> None:
        if amount > 0 and end > at and ledger.covers(queue, flavor, resource):
            amounts.setdefault((queue, flavor), {})[resource] = amount
            ends.setdefault((queue, flavor), {})[resource] = end

    for (queue, flavor, resource), tokens in spent.budgets.items():
        if resource in BUDGET_RESOURCES:
            end = period_end(resource, at)
            if period_end(resource, spent.measured_at) == end:
                add(queue, flavor, resource, tokens, end)
    for (queue, flavor), recent in spent.recent.items():
        end = recent.last_at + RATE_WINDOW_SECONDS
        add(queue, flavor, "tokens-per-minute", recent.tokens, end)
        add(queue, flavor, "requests-per-minute", recent.requests, end)
    return [(key, amounts[key], ends[key]) for key in sorted(amounts)]


def _key_restorations(
    spent: Spent, at: float
) -> list[tuple[str, dict[str, int], dict[str, float]]]:
    """Per API key: what to charge its own level again and when each stops counting
    (the day's budget if of the day ``at`` is in; the last minute's tokens until a
    minute after its latest call)."""
    restorations = []
    day_end = period_end(TPD, at)
    for key in sorted(spent.keys):
        spend = spent.keys[key]
        amounts: dict[str, int] = {}
        ends: dict[str, float] = {}
        if spend.day > 0 and period_end(TPD, spent.measured_at) == day_end:
            amounts[TPD], ends[TPD] = spend.day, day_end
        if spend.recent > 0 and spend.last_at + RATE_WINDOW_SECONDS > at:
            amounts[TPM], ends[TPM] = spend.recent, spend.last_at + RATE_WINDOW_SECONDS
        if amounts:
            restorations.append((key, amounts, ends))
    return restorations


def _store_warnings(found: Mapping[str, str]) -> list[str]:
    warnings = []
    if found.get("appendonly", "no") != "yes" and not found.get("save", "").strip():
        warnings.append(
            "Redis keeps nothing on disk (appendonly no, no save points): after a restart "
            "the token budgets are rebuilt from the usage records only (calls not yet "
            "recorded are forgotten); set appendonly yes"
        )
    elif found.get("appendonly", "no") != "yes":
        warnings.append(
            "Redis persists by snapshots only (appendonly no): a restart loses what was "
            "charged since the last snapshot; set appendonly yes"
        )
    policy = found.get("maxmemory-policy")
    if policy is not None and policy != "noeviction":
        warnings.append(
            f"Redis evicts keys when full (maxmemory-policy {policy}): ledger keys may "
            "vanish; set maxmemory-policy noeviction"
        )
    return warnings


def _log_failure(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and (err := future.exception()) is not None:
        log.error("cannot give back an abandoned reservation: %s", err)


def _static_path(
    queue: ResourceNode, flavor: str, resources: tuple[str, ...], tag: str, owner: str
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
        "p": f"{tag}:res:",
        "k": f"{tag}:",
        "o": owner,
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
