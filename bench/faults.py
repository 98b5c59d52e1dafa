"""Fault benchmark: what two gateways under load do when Redis, PostgreSQL or one of
them fails, and how they come back.

    python -m bench.faults [--scenario redis-kill|redis-freeze|pg-restart|gateway-kill|all]
                           [--seconds 40] [--fault-at 10] [--fault-seconds 8] [--markdown]
    python -m bench.faults --from-json report.json --markdown   # the table of a saved run

Each scenario starts its own servers (``bench/fault_stack.py``): a Redis and a PostgreSQL
it may hurt, a fast upstream, and two ``ignara serve`` sharing them. It drives inference
calls through both gateways (``bench/fault_load.py``: tenant ``roomy`` with quota to
spare, tenant ``tight`` far over its per-minute rate and day budget; streaming and not)
and a trickle of workload submissions retried with their Idempotency-Keys, injects the
fault at ``--fault-at`` seconds, removes it ``--fault-seconds`` later, keeps the load on
until ``--seconds``, lets the workloads finish, and reports (``bench/fault_report.py``):

- every call and submission attempt by phase (before, during, after the fault) and outcome
  (status and ``error.code``, ``timeout`` past the client's timeout, ``connection ...``);
- latency of the errors (are 503s fast?);
- time from the fault to the first roomy success, and from its removal until roomy calls
  stopped failing (``recovered_after_removal_s``; null if they still failed at the end);
- tokens granted (reported usage of the 200s) against the tight queue's quota, the most
  granted within any 60 s, and, per tenant, what the ledger's day budget charged and the
  usage records hold against what was granted;
- workloads accepted versus stored afterwards (``lost``), stored or run twice, unfinished.

The faults:

- ``redis-kill``: SIGKILL to Redis, started again empty on the same port;
- ``redis-freeze``: SIGSTOP to Redis (it keeps accepting connections, answers nothing),
  then SIGCONT;
- ``pg-restart``: PostgreSQL stopped (fast shutdown) and started again;
- ``gateway-kill``: SIGKILL to the gateway running the admission loop, started again on
  its port as a supervisor would.

Prints one JSON object on stdout (``--markdown``: the README's table instead); progress on
stderr. Run on demand, never from tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import httpx

from bench.fault_load import Call, Clock, Deadline, Submission, infer_forever, submit_trickle
from bench.fault_report import (
    FINAL_STATES,
    Fault,
    JobRun,
    WorkloadRow,
    inference_summary,
    markdown,
    token_summary,
    workload_summary,
)
from bench.fault_stack import FLAVOR, QUOTA, Stack, stack
from bench.proxy import BenchError
from gateway.ledgers import LedgerUnavailableError, create_ledger
from quota.config import parse_quota_config

SCENARIOS = ("redis-kill", "redis-freeze", "pg-restart", "gateway-kill")
_JOB_DIR = re.compile(r"^([0-9a-f]{32})-(\d+)$")

_quiet = False


def log(message: str) -> None:
    if not _quiet:
        print(message, file=sys.stderr, flush=True)


# -- the faults ---------------------------------------------------------------------------


def injection(scenario: str, s: Stack) -> tuple[str, Callable[[], None], Callable[[], None]]:
    """What the fault is, how to inject it and how to remove it (blocking calls: they
    run in a thread while the load goes on)."""
    if scenario == "redis-kill":
        return "SIGKILL to Redis; started again empty on its port", s.redis.kill, s.redis.start
    if scenario == "redis-freeze":
        return "SIGSTOP to Redis; SIGCONT", s.redis.freeze, s.redis.thaw
    if scenario == "pg-restart":
        return (
            "PostgreSQL stopped (fast shutdown); started again",
            lambda: s.postgres.stop("fast"),
            s.postgres.start,
        )
    victim: list[int] = []

    def kill_leader() -> None:
        victim.append(leader(s))
        s.gateways[victim[0]].kill()

    def restart() -> None:
        s.gateways[victim[0]].start()
        s.gateways[victim[0]].wait_healthy()

    return (
        "SIGKILL to the gateway running the admission loop; started again on its port",
        kill_leader,
        restart,
    )


def leader(s: Stack) -> int:
    """The index of the gateway holding the admission loop (the first if none says so)."""
    for i, url in enumerate(s.urls()):
        with contextlib.suppress(httpx.HTTPError, ValueError):
            if httpx.get(f"{url}/readyz", timeout=2).json().get("admission_leader"):
                return i
    return 0


async def inject(
    s: Stack, clock: Clock, fault: Fault, args: argparse.Namespace, until: Deadline
) -> None:
    """The fault at ``--fault-at``, removed ``--fault-seconds`` later; the load then goes on
    at least ``--after`` seconds (a gateway may take a while to start again)."""
    what, begin, end = injection(fault.scenario, s)
    fault.what = what
    await asyncio.sleep(max(0.0, args.fault_at - clock()))
    fault.start = clock()
    await asyncio.to_thread(begin)
    fault.applied = clock()
    log(f"  {fault.start:6.2f}s fault: {what.split(';')[0]}")
    await asyncio.sleep(max(0.0, fault.start + args.fault_seconds - clock()))
    fault.removing = clock()
    try:
        await asyncio.to_thread(end)
    except (BenchError, RuntimeError, OSError, subprocess.SubprocessError) as err:
        # Reported, and the load goes on: what the gateways do then is the result.
        fault.removal_error = f"{type(err).__name__}: {err}"[-2000:]
    fault.end = clock()
    until.at = max(until.at, fault.end + args.after)
    log(f"  {fault.end:6.2f}s fault removed" + (" (FAILED)" if fault.removal_error else ""))


# -- after the load -----------------------------------------------------------------------


async def workload_rows(database_url: str) -> list[WorkloadRow]:
    connection = await asyncpg.connect(database_url, timeout=10)
    try:
        rows = await connection.fetch(
            "SELECT id, idempotency_key, state, attempt, reason_message FROM workloads"
            " WHERE tenant = 'batch'"
        )
    finally:
        await connection.close()
    return [
        WorkloadRow(r["id"], r["idempotency_key"], r["state"], r["attempt"], r["reason_message"])
        for r in rows
    ]


async def drain(database_url: str, accepted: set[str], seconds: float) -> list[WorkloadRow]:
    """The batch tenant's workloads once every accepted one is final (or ``seconds`` on)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            rows = await workload_rows(database_url)
        except (OSError, asyncpg.PostgresError) as err:
            if time.monotonic() > deadline:
                raise BenchError(f"cannot read the workloads: {err}") from err
            await asyncio.sleep(1)
            continue
        open_ = [r for r in rows if r.id in accepted and r.state not in FINAL_STATES]
        if not open_ or time.monotonic() > deadline:
            return rows
        await asyncio.sleep(0.5)


def job_runs(root: Path) -> list[JobRun]:
    runs = []
    for path in sorted(root.glob("*")) if root.exists() else []:
        match = _JOB_DIR.match(path.name)
        if match is None:
            continue
        try:
            lines = len((path / "output.log").read_text(errors="replace").split())
        except OSError:
            lines = 0
        runs.append(JobRun(match[1], int(match[2]), lines))
    return runs


async def ledger_charges(s: Stack) -> dict[str, int | str]:
    """What the shared ledger's day budget of each inference queue holds."""
    ledger = create_ledger(s.redis.url, parse_quota_config(QUOTA), prefix="ignara")
    out: dict[str, int | str] = {}
    try:
        for queue in ("roomy", "tight"):
            try:
                out[queue] = await asyncio.wait_for(
                    ledger.usage(queue, FLAVOR, "tokens-per-day"), timeout=10
                )
            except (LedgerUnavailableError, TimeoutError) as err:
                out[queue] = f"unreadable: {type(err).__name__}: {err}"
    finally:
        await ledger.aclose()
    return out


async def usage_records(session: aiohttp.ClientSession, s: Stack) -> dict[str, int | str]:
    """Total tokens the usage API reports per inference tenant (asked of a live gateway)."""
    out: dict[str, int | str] = {}
    url = next((g.url for g in s.gateways if g.alive), None)
    for tenant in ("roomy", "tight"):
        if url is None:
            out[tenant] = "no gateway alive"
            continue
        try:
            async with session.get(
                f"{url}/api/v1/usage",
                params={"tenant": tenant},
                headers={"Authorization": f"Bearer {s.admin_key}"},
                timeout=aiohttp.ClientTimeout(total=10),
            ) as response:
                body = await response.json(content_type=None)
                if response.status != 200:
                    out[tenant] = f"HTTP {response.status}: {body}"
                else:
                    out[tenant] = int(body["totals"]["total_tokens"])
        except (TimeoutError, aiohttp.ClientError, ValueError, KeyError) as err:
            out[tenant] = f"unreadable: {type(err).__name__}: {err}"
    return out


# -- one scenario -------------------------------------------------------------------------


async def drive(scenario: str, s: Stack, args: argparse.Namespace) -> dict[str, Any]:
    clock = Clock()
    fault = Fault(scenario)
    calls: list[Call] = []
    submissions: list[Submission] = []
    urls = s.urls()
    until = Deadline(args.seconds)
    tenants = ["tight"] * args.tight_clients + ["roomy"] * (args.clients - args.tight_clients)
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
    async with aiohttp.ClientSession(connector=connector) as session:
        clients = [
            infer_forever(
                session,
                clock,
                urls=urls,
                gateway=i % 2,
                token=s.keys[tenant],
                tenant=tenant,
                stream=(i // 2) % 2 == 1,
                think=args.think,
                timeout=args.client_timeout,
                until=until,
                out=calls,
            )
            for i, tenant in enumerate(tenants)
        ]
        trickle = submit_trickle(
            session,
            clock,
            urls=urls,
            token=s.keys["batch"],
            every=args.submit_every,
            timeout=args.client_timeout,
            until=until,
            give_up_after=args.give_up,
            prefix=f"{scenario}-{int(time.time())}",
            out=submissions,
        )
        await asyncio.gather(inject(s, clock, fault, args, until), trickle, *clients)
        fault.stop = until.at
        log(f"  {clock():6.2f}s load stopped: {len(calls)} calls, {len(submissions)} submissions")
        await asyncio.sleep(1.0)  # the last streams' reconciliations
        accepted = {x.workload_id for x in submissions if x.workload_id is not None}
        rows = await drain(s.database_url, accepted, args.drain)
        log(f"  {clock():6.2f}s workloads drained")
        charged = await ledger_charges(s)
        recorded = await usage_records(session, s)
    return {
        "scenario": scenario,
        "fault": fault.to_json(),
        "inference": inference_summary(fault, calls),
        "tokens": token_summary(fault, calls, charged, recorded),
        "workloads": workload_summary(fault, submissions, rows, job_runs(s.jobs_root)),
        "gateways_alive_at_end": [g.alive for g in s.gateways],
    }


def run_scenario(scenario: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    workdir = tmp / scenario
    workdir.mkdir()
    log(f"{scenario}: starting Redis, PostgreSQL, the upstream and two gateways")
    with stack(workdir, args.upstream_delay) as s:
        log(f"  gateways {', '.join(s.urls())}; load for {args.seconds:g}s")
        result = asyncio.run(drive(scenario, s, args))
        for gateway in s.gateways:
            if not gateway.alive:  # always shown: it died of the fault or of itself
                print(
                    f"bench/faults.py: gateway {gateway.name} died:\n{gateway.log_tail()}",
                    file=sys.stderr,
                )
    return result


# -- main ---------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    load = None
    with contextlib.suppress(OSError):
        load = [round(x, 2) for x in os.getloadavg()]
    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "loadavg_at_start": load,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--seconds", type=float, default=40.0, help="load per scenario")
    parser.add_argument(
        "--after", type=float, default=10.0, help="load at least this long after the fault"
    )
    parser.add_argument("--fault-at", type=float, default=10.0, help="seconds into the load")
    parser.add_argument("--fault-seconds", type=float, default=8.0, help="how long it lasts")
    parser.add_argument("--clients", type=int, default=24, help="inference clients")
    parser.add_argument(
        "--tight-clients", type=int, default=None, help="of which on tenant tight (a third)"
    )
    parser.add_argument("--think", type=float, default=0.02, help="pause after a 200, s")
    parser.add_argument("--upstream-delay", type=float, default=0.02, help="before each answer")
    parser.add_argument("--client-timeout", type=float, default=5.0, help="per call, s")
    parser.add_argument("--submit-every", type=float, default=0.4, help="new workload every, s")
    parser.add_argument(
        "--give-up", type=float, default=20.0, help="retry submissions this long after the load"
    )
    parser.add_argument("--drain", type=float, default=60.0, help="wait this long for workloads")
    parser.add_argument("--markdown", action="store_true", help="print the README's table")
    parser.add_argument("--from-json", metavar="FILE", help="a saved report: no run")
    parser.add_argument("--json-only", action="store_true", help="no progress on stderr")
    parser.add_argument("--keep-tmp", action="store_true", help="keep logs and job directories")
    args = parser.parse_args(argv)
    if args.tight_clients is None:
        args.tight_clients = args.clients // 3
    if not 0 < args.fault_at < args.fault_at + args.fault_seconds < args.seconds:
        parser.error("need 0 < --fault-at < --fault-at + --fault-seconds < --seconds")
    if args.clients < 2 or not 0 <= args.tight_clients < args.clients:
        parser.error("--clients >= 2, and --tight-clients fewer than them")
    return args


def main(argv: list[str] | None = None) -> int:
    global _quiet
    args = parse_args(argv)
    _quiet = args.json_only
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        print(markdown(saved["scenarios"]) if args.markdown else json.dumps(saved, indent=2))
        return 0
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    settings = {
        k: v
        for k, v in vars(args).items()
        if k not in ("markdown", "from_json", "json_only", "keep_tmp")
    }
    report: dict[str, Any] = {"machine": machine(), "settings": settings, "scenarios": []}
    scenarios = SCENARIOS if args.scenario == "all" else (args.scenario,)
    tmp = Path(tempfile.mkdtemp(prefix="ignara-faults-"))
    failed = False
    try:
        for scenario in scenarios:
            try:
                report["scenarios"].append(run_scenario(scenario, args, tmp))
            except BenchError as err:  # the next scenario starts afresh
                print(f"bench/faults.py: {scenario}: {err}", file=sys.stderr)
                report["scenarios"].append({"scenario": scenario, "error": str(err)[-2000:]})
                failed = True
    finally:
        if args.keep_tmp:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    with contextlib.suppress(OSError):
        report["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(markdown(report["scenarios"]) if args.markdown else json.dumps(report, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
