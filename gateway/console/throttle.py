"""How many console sign-ins may fail: per client address and per API key, per window.

Each attempt is counted before the key is even looked at, atomically, in every bucket
it falls in (its client address; its key id when the key has the shape of an Ignara
key), so a burst of concurrent guesses cannot slip past the limit between a check and
a count. An attempt over the limit in any bucket is refused (429) until that bucket's
window ends. A successful sign-in takes back its own attempt, and nothing else: it
never resets a counter, so it cannot clear another address's failures (nor its own).

Three places to count, one behaviour: Redis when the gateway has one (shared by every
replica), else the database (shared too), else this process's memory.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError
from sqlalchemy import case, delete, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import col

from tenants import Database
from tenants.models.console_session import SignInAttemptRow

__all__ = [
    "FAILURES",
    "WINDOW_SECONDS",
    "MemoryThrottle",
    "RedisThrottle",
    "SignInThrottle",
    "SqlThrottle",
    "buckets_for",
]

FAILURES = 5
WINDOW_SECONDS = 60.0
MAX_BUCKETS = 100_000

log = logging.getLogger(__name__)


def buckets_for(address: str, key_id: str | None) -> list[str]:
    """The counters a sign-in attempt falls in, named by hash (no address or key id is
    stored as such)."""
    names = [f"address:{address}"] + ([f"key:{key_id}"] if key_id else [])
    return [hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest() for name in names]


class SignInThrottle(Protocol):
    limit: int
    window: float

    async def attempt(self, buckets: Sequence[str]) -> float | None:
        """Count one attempt in each bucket: ``None`` if it may go on, else the seconds
        until it may (the longest wait of the buckets over the limit)."""
        ...

    async def succeeded(self, buckets: Sequence[str]) -> None:
        """Take back a successful attempt's count."""
        ...


class MemoryThrottle:
    """Counters in this process's memory (one gateway, or a store that failed)."""

    def __init__(
        self,
        *,
        limit: int = FAILURES,
        window: float = WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._counts: dict[str, tuple[float, int]] = {}

    async def attempt(self, buckets: Sequence[str]) -> float | None:
        now = self._clock()
        if len(self._counts) >= MAX_BUCKETS:  # a flood of addresses must not grow memory
            self._counts = {
                b: (start, n) for b, (start, n) in self._counts.items() if now - start < self.window
            }
            if len(self._counts) >= MAX_BUCKETS:
                self._counts.clear()
        wait: float | None = None
        for bucket in buckets:
            start, count = self._counts.get(bucket, (now, 0))
            if now - start >= self.window:
                start, count = now, 0
            self._counts[bucket] = (start, count + 1)
            if count + 1 > self.limit:
                wait = max(wait or 0.0, start + self.window - now)
        return wait

    async def succeeded(self, buckets: Sequence[str]) -> None:
        for bucket in buckets:
            found = self._counts.get(bucket)
            if found is not None and found[1] > 0:
                self._counts[bucket] = (found[0], found[1] - 1)


# KEYS: the buckets; ARGV[1]: the window in ms. Returns the longest wait (ms) of the
# buckets now over ARGV[2], or 0.
_ATTEMPT = """
local wait = 0
for i, key in ipairs(KEYS) do
  local n = redis.call('INCR', key)
  if n == 1 then redis.call('PEXPIRE', key, ARGV[1]) end
  if n > tonumber(ARGV[2]) then
    local ttl = redis.call('PTTL', key)
    if ttl < 0 then redis.call('PEXPIRE', key, ARGV[1]); ttl = tonumber(ARGV[1]) end
    if ttl > wait then wait = ttl end
  end
end
return wait
"""
_TAKE_BACK = """
for i, key in ipairs(KEYS) do
  local n = tonumber(redis.call('GET', key) or '0')
  if n > 0 then redis.call('DECR', key) end
end
return 0
"""


class RedisThrottle:
    """Counters in Redis, shared by every replica using it. When Redis cannot answer,
    this process counts on its own meanwhile (still a limit, only per replica)."""

    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str = "ignara",
        limit: int = FAILURES,
        window: float = WINDOW_SECONDS,
    ) -> None:
        self.limit = limit
        self.window = window
        self._redis = redis
        self._prefix = f"{prefix}:console:sign-in:"
        self._fallback = MemoryThrottle(limit=limit, window=window)

    @classmethod
    def from_url(cls, url: str, *, timeout: float, **options: Any) -> RedisThrottle:
        redis = Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        return cls(redis, **options)

    async def attempt(self, buckets: Sequence[str]) -> float | None:
        keys = [self._prefix + b for b in buckets]
        try:
            wait = await self._redis.eval(
                _ATTEMPT, len(keys), *keys, int(self.window * 1000), self.limit
            )
        except (RedisError, OSError) as err:
            log.warning("sign-in throttle: Redis did not answer (%s); counting here", err)
            return await self._fallback.attempt(buckets)
        return int(wait) / 1000 if int(wait) > 0 else None

    async def succeeded(self, buckets: Sequence[str]) -> None:
        keys = [self._prefix + b for b in buckets]
        try:
            await self._redis.eval(_TAKE_BACK, len(keys), *keys)
        except (RedisError, OSError) as err:
            log.warning("sign-in throttle: Redis did not answer (%s)", err)

    async def aclose(self) -> None:
        await self._redis.aclose()


class SqlThrottle:
    """Counters in the ``console_sign_in_attempts`` table (SQLite or PostgreSQL), one
    atomic upsert per bucket."""

    def __init__(
        self,
        database: Database,
        *,
        limit: int = FAILURES,
        window: float = WINDOW_SECONDS,
        sweep_seconds: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.limit = limit
        self.window = window
        self._db = database
        self._clock = clock
        self._sweep_every = sweep_seconds
        self._swept_at = -math.inf

    async def attempt(self, buckets: Sequence[str]) -> float | None:
        now_s = self._clock()
        now = datetime.fromtimestamp(now_s, UTC)
        cutoff = datetime.fromtimestamp(now_s - self.window, UTC)
        insert = pg_insert if self._db.engine.dialect.name == "postgresql" else sqlite_insert
        table = SignInAttemptRow.__table__  # type: ignore[attr-defined]
        stale = table.c.window_start <= cutoff
        wait: float | None = None
        async with self._db.session() as db:
            if now_s - self._swept_at >= self._sweep_every:
                self._swept_at = now_s
                await db.exec(delete(table).where(stale))
            for bucket in buckets:
                statement = (
                    insert(table)
                    .values(bucket=bucket, window_start=now, attempts=1)
                    .on_conflict_do_update(
                        index_elements=[table.c.bucket],
                        set_={
                            "attempts": case((stale, 1), else_=table.c.attempts + 1),
                            "window_start": case((stale, now), else_=table.c.window_start),
                        },
                    )
                    .returning(table.c.attempts, table.c.window_start)
                )
                attempts, start = (await db.exec(statement)).one()
                if attempts > self.limit:
                    start = start if start.tzinfo else start.replace(tzinfo=UTC)
                    left = start.timestamp() + self.window - now_s
                    wait = max(wait or 0.0, left, 1.0)
        return wait

    async def succeeded(self, buckets: Sequence[str]) -> None:
        async with self._db.session() as db:
            await db.exec(
                update(SignInAttemptRow)
                .where(col(SignInAttemptRow.bucket).in_(list(buckets)))
                .where(col(SignInAttemptRow.attempts) > 0)
                .values(attempts=col(SignInAttemptRow.attempts) - 1)
            )
