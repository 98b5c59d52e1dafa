"""Benchmark: reserve + reconcile pairs on one RedisLedger, from C concurrent callers.

    .venv/bin/python -m bench.ledger [-n 5000] [--concurrency 1] [--protocol 2|3] [--url URL]

The ledger's calls are pipelined on one Redis connection; with ``--concurrency`` above
1, those made in the same event-loop tick go out in one write
(``gateway/ledgers/batching.py``), as under a gateway's load.

Not a test (pytest does not collect it). Uses ``--url``, else ``REDIS_URL``, else a
throwaway ``redis-server`` (``tests/support/redis.py``). Each pair reserves
tokens-per-minute, requests-per-minute and tokens-per-day for queue ``a`` (depth 2)
and reconciles all three. Prints one JSON object: pairs/s, the client's CPU µs per
pair (``time.process_time``; split into user and system time: the kernel's share
is mostly the loopback TCP stack) and the server's (``INFO cpu``, and the scripts' own
time from ``INFO commandstats``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from contextlib import ExitStack
from typing import Any

from redis.asyncio import Redis
from redis.utils import HIREDIS_AVAILABLE

from gateway.ledgers import Grant, RedisLedger
from quota.model import QuotaConfig
from tests.ledgers.configs import POOL, RPM, TPD, TPM, cohort, config, queue
from tests.support.redis import redis_server, unique_prefix


def _roomy() -> QuotaConfig:
    """Queue ``a`` under cohort ``org`` (depth 2), with room for any run."""
    quotas: dict[str, int | dict[str, int]] = {TPM: 10**9, RPM: 10**9, TPD: 10**12}
    return config(cohorts=[cohort("org")], queues=[queue("a", "org", quotas)])


async def _server_cpu(client: Redis) -> tuple[float, float]:
    cpu: dict[str, Any] = await client.info("cpu")
    stats: dict[str, Any] = await client.info("commandstats")
    script_us = sum(
        float(v["usec"]) for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval")
    )
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), script_us


async def bench(url: str, n: int, protocol: int, concurrency: int) -> dict[str, Any]:
    client = Redis.from_url(url, decode_responses=True, protocol=protocol)
    ledger = RedisLedger(client, _roomy(), prefix=unique_prefix("bench"), owns_client=True)
    amounts = {TPM: 100, RPM: 1, TPD: 100}
    actual = {TPM: 50, RPM: 1, TPD: 50}

    async def pairs(count: int) -> None:
        for _ in range(count):
            grant = await ledger.reserve("a", POOL, amounts)
            assert isinstance(grant, Grant), grant
            await ledger.reconcile(grant, actual)

    n -= n % concurrency  # the same number of pairs from each caller
    try:
        await pairs(200)  # warm up: load the scripts, fill the caches
        await client.config_resetstat()
        server_before, _ = await _server_cpu(client)
        wall, cpu, times = time.perf_counter(), time.process_time(), os.times()
        await asyncio.gather(*(pairs(n // concurrency) for _ in range(concurrency)))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        user, system = os.times().user - times.user, os.times().system - times.system
        server_after, script_us = await _server_cpu(client)
    finally:
        await ledger.aclose()
    return {
        "pairs": n,
        "concurrency": concurrency,
        "protocol": protocol,
        "hiredis": HIREDIS_AVAILABLE,
        "pairs_per_s": round(n / wall),
        "client_cpu_us_per_pair": round(cpu / n * 1e6, 1),
        "client_user_us_per_pair": round(user / n * 1e6, 1),  # the rest is the kernel's
        "client_sys_us_per_pair": round(system / n * 1e6, 1),
        "server_cpu_us_per_pair": round((server_after - server_before) / n * 1e6, 1),
        "script_us_per_pair": round(script_us / n, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--protocol", type=int, choices=(2, 3), default=2)
    parser.add_argument("--url")
    options = parser.parse_args()
    with ExitStack() as stack:
        url = options.url or stack.enter_context(redis_server())
        report = asyncio.run(bench(url, options.n, options.protocol, options.concurrency))
        print(json.dumps(report))


if __name__ == "__main__":
    main()
