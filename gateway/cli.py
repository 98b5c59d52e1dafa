"""The `ignara` command line: `serve`, `apply`, `simulate`, `keys`, `report`, `replay`
and `replay-quotas`."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from gateway.settings import Settings


@click.group()
def main() -> None:
    """Ignara Gateway: admission control for shared AI compute."""


@main.command()
@click.option("--host", default=None, help="Address to bind (default: IGNARA_HOST or 127.0.0.1).")
@click.option("--port", default=None, type=int, help="Port (default: IGNARA_PORT or 8080).")
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Apply this ignara.yaml before serving: the database then says what the file "
    "says, and what the file leaves out is removed.",
)
@click.option(
    "--seed",
    "seed_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Apply this ignara.yaml only if the database holds no configuration yet "
    "(what `make run` does): changes an admin made are never undone.",
)
def serve(
    host: str | None, port: int | None, config_file: str | None, seed_file: str | None
) -> None:
    """Run the gateway on its embedded defaults."""
    import uvicorn

    from gateway.app import create_app
    from gateway.http_protocol import JoiningHttpToolsProtocol
    from gateway.process import settle_the_heap, tune_collector

    if config_file is not None and seed_file is not None:
        raise click.UsageError("--config and --seed exclude each other")
    settings = Settings.from_env()
    if seed_file is not None:
        queues = _migrate_and_apply(settings, seed_file, only_if_unconfigured=True)
    else:
        queues = _migrate_and_apply(settings, config_file)
    young = settings.server.gc_young_threshold
    tune_collector(young, queues=queues)
    # Again at each config load: queues added later raise the threshold too.
    app = create_app(settings, on_queues=lambda count: tune_collector(young, queues=count))
    settle_the_heap()
    uvicorn.run(
        app,
        host=host or settings.server.host,
        port=port or settings.server.port,
        log_level=settings.server.log_level,
        log_config=None,  # uvicorn's lines go through the app's (gateway.observability.logs)
        access_log=False,  # the gateway writes its own (IGNARA_ACCESS_LOG), with tenants
        http=JoiningHttpToolsProtocol,
    )


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
def apply(file: str) -> None:
    """Apply a declarative config to the database (DATABASE_URL, or ./ignara.db)."""
    _migrate_and_apply(Settings.from_env(), file)


def _migrate_and_apply(
    settings: Settings, config_file: str | None, *, only_if_unconfigured: bool = False
) -> int:
    """Bring the schema up to date and, given a file, make the database say what it says
    (with ``only_if_unconfigured``, only when nothing was configured yet). Returns how
    many cluster queues the database then holds."""
    import asyncio

    from gateway.backends.registry import refused_secret_variable
    from gateway.inference.catalog import refused_key_variable
    from gateway.services import create_private_database
    from quota.errors import ConfigError
    from tenants import Database, TenantsError, load_config_file
    from tenants.services import apply_config, count_cluster_queues, is_unconfigured

    async def run() -> tuple[str, int]:
        create_private_database(settings.database.url)
        database = Database(settings.database.url)
        try:
            await database.migrate()
            message = await apply_file(database)
            async with database.session() as session:
                return message, await count_cluster_queues(session)
        finally:
            await database.dispose()

    async def apply_file(database: Database) -> str:
        if config_file is None:
            return "schema up to date"
        config = load_config_file(config_file)
        if (
            error := refused_key_variable(config.models, settings.inference.key_rule)
            or refused_secret_variable(config.backends, settings.backends.secret_rule)
        ) is not None:
            raise ConfigError(error)
        async with database.session() as session:
            if only_if_unconfigured and not await is_unconfigured(session):
                return (
                    f"{config_file}: not applied, the database already holds a "
                    f"configuration (kept as it is; `ignara apply {config_file}` "
                    "would make it say what the file says)"
                )
            report = await apply_config(session, config, actor="ignara apply")
        return f"{config_file}: {report.summary()}"

    try:
        message, queues = asyncio.run(run())
    except (ConfigError, TenantsError) as err:
        click.echo(f"cannot apply {config_file}: {err}", err=True)
        sys.exit(2)
    click.echo(message, err=True)
    return queues


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the snapshots as one JSON object.")
def simulate(file: str, as_json: bool) -> None:
    """Play an admission scenario; exit 0 if every expect held, 1 if not, 2 if invalid."""
    from quota.errors import ScenarioError
    from quota.scenario import load_scenario
    from quota.simulate import play

    try:
        result = play(load_scenario(file))
    except ScenarioError as err:
        click.echo(f"invalid scenario {file}: {err}", err=True)
        sys.exit(2)
    if as_json:
        click.echo(json.dumps(result.to_json(), sort_keys=False))
    else:
        click.echo(result.describe())
    for failure in result.failures:
        click.echo(failure, err=True)
    sys.exit(0 if result.ok else 1)


T = TypeVar("T")

CLI_ACTOR = "ignara keys (cli)"
_DURATION = re.compile(r"(\d+)([smhd]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
MIN_EXPIRY, MAX_EXPIRY = 60, 2 * 365 * 86400  # as the admin API allows
MAX_KEY_LIMIT = 10**12  # tokens, as the admin API allows (tenants' MAX_KEY_LIMIT)


@main.group()
def keys() -> None:
    """Issue, list, rotate and revoke API keys in the database (DATABASE_URL, or ./ignara.db),
    with the pepper the server uses (IGNARA_KEY_PEPPER, or the pepper file). Each change
    is audited as made by "ignara keys (cli)"; running gateways notice within a second."""


def _expires_in(_: click.Context, __: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    match = _DURATION.fullmatch(value.strip())
    if match is None:
        raise click.BadParameter("write a duration such as 3600, 90m, 12h or 30d")
    seconds = int(match[1]) * _UNIT_SECONDS[match[2]]
    if not MIN_EXPIRY <= seconds <= MAX_EXPIRY:
        raise click.BadParameter("must be between 60 seconds and 730 days")
    return seconds


def _run_on_database(work: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``work(session)`` in one transaction on the migrated database; a refusal
    of the tenants services ends the command with its message and exit status 2."""
    import asyncio

    from tenants import Database, TenantsError

    async def run() -> T:
        database = Database(Settings.from_env().database.url)
        try:
            await database.migrate()
            async with database.session() as session:
                return await work(session)
        finally:
            await database.dispose()

    try:
        return asyncio.run(run())
    except TenantsError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)


@keys.command("create")
@click.option("--tenant", default=None, help="The tenant the key belongs to.")
@click.option(
    "--admin", "platform", is_flag=True, help="A platform admin key (of no tenant) instead."
)
@click.option("--principal", required=True, help="Who holds the key (a user or service name).")
@click.option(
    "--role",
    type=click.Choice(["member", "tenant-admin"]),
    default=None,
    help="A tenant key's role (default: member).",
)
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    help="Narrow the key to these scopes (repeat it); default: every scope of its role.",
)
@click.option(
    "--expires-in", callback=_expires_in, default=None, help="e.g. 90m, 12h, 30d (default: never)."
)
@click.option(
    "--tokens-per-minute",
    type=click.IntRange(1, MAX_KEY_LIMIT),
    default=None,
    help="The key's own rate, below its queue's (default: the queue's alone).",
)
@click.option(
    "--tokens-per-day",
    type=click.IntRange(1, MAX_KEY_LIMIT),
    default=None,
    help="The key's own day budget, below its queue's (default: the queue's alone).",
)
def create_key(
    tenant: str | None,
    platform: bool,
    principal: str,
    role: str | None,
    scopes: tuple[str, ...],
    expires_in: int | None,
    tokens_per_minute: int | None,
    tokens_per_day: int | None,
) -> None:
    """Issue a key; its token goes to stdout, once (everything else to stderr).

    \b
    ignara keys create --admin --principal alice          a platform admin key
    ignara keys create --tenant vision --principal ci     a member key of tenant vision
    ignara keys create --tenant vision --principal ci --tokens-per-minute 20000
                                                          one that spends at most that
    """
    from datetime import timedelta

    from gateway.auth.issue import issue_api_key
    from gateway.services import load_pepper
    from tenants.models._base import utcnow
    from tenants.services.access import ADMIN, MEMBER, PRINCIPAL_NAME

    if platform == (tenant is not None):
        raise click.UsageError("give exactly one of --tenant TENANT or --admin")
    if platform and role is not None:
        raise click.UsageError("a platform key carries the admin role; --role is for tenant keys")
    if not re.fullmatch(PRINCIPAL_NAME, principal):
        raise click.BadParameter(
            "lowercase letters, digits and . _ @ -, starting with a letter or digit",
            param_hint="--principal",
        )
    settings = Settings.from_env()
    pepper = load_pepper(settings)
    expires_at = utcnow() + timedelta(seconds=expires_in) if expires_in else None

    async def create(session: Any) -> tuple[Any, str]:
        return await issue_api_key(
            session,
            pepper,
            tenant=tenant,
            principal=principal,
            roles=[ADMIN] if platform else [role or MEMBER],
            scopes=list(scopes) if scopes else None,  # all the role allows
            expires_at=expires_at,
            actor=CLI_ACTOR,
            limits=_limits(tokens_per_minute, tokens_per_day),
        )

    key, token = _run_on_database(create)
    owner = "the platform" if key.tenant is None else f"tenant {key.tenant}"
    click.echo(
        f"key {key.key_id} of {owner} for {principal}: roles {', '.join(key.roles)}; "
        f"scopes {', '.join(key.scopes)}; limits {_limits_text(key)}; "
        f"expires {key.expires_at.isoformat() if key.expires_at else 'never'}. "
        "The token below is shown only now:",
        err=True,
    )
    click.echo(token)


@keys.command("list")
@click.option("--tenant", default=None, help="The tenant whose keys to list.")
@click.option("--admin", "platform", is_flag=True, help="List the platform keys instead.")
def list_keys(tenant: str | None, platform: bool) -> None:
    """One line per key (never a secret): id, principal, roles, scopes, created,
    expires, revoked, its own limits (tokens-per-minute=N,tokens-per-day=N, or -), last
    used, calls and tokens of the last 30 days, and its flags (idle, anomalous, or -)."""
    from gateway.admin.key_activity import keys_out
    from tenants.services.api_keys import list_api_keys

    if platform == (tenant is not None):
        raise click.UsageError("give exactly one of --tenant TENANT or --admin")
    auth = Settings.from_env().auth

    async def listing(session: Any) -> list[str]:
        records = await list_api_keys(session, tenant)
        activity = await keys_out(session, [key for key, _ in records], auth)
        lines = []
        for key, principal in records:
            seen = activity[key.key_id]
            flags = [
                name for name, on in (("idle", seen.idle), ("anomalous", seen.anomalous)) if on
            ]
            lines.append(
                "\t".join(
                    [
                        key.key_id,
                        principal.name,
                        ",".join(key.roles),
                        ",".join(key.scopes),
                        key.created_at.isoformat(),
                        key.expires_at.isoformat() if key.expires_at else "-",
                        key.revoked_at.isoformat() if key.revoked_at else "-",
                        _limits_text(key),
                        key.last_used_at.isoformat() if key.last_used_at else "-",
                        str(seen.calls_30d),
                        str(seen.tokens_30d),
                        ",".join(flags) or "-",
                    ]
                )
            )
        return lines

    for line in _run_on_database(listing):
        click.echo(line)


def _limit_or_none(_: click.Context, param: click.Parameter, value: str | None) -> Any:
    """A limit to set (a number), to lift ("none"), or to leave (not given)."""
    if value is None:
        return _UNCHANGED
    if value.strip().lower() == "none":
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= MAX_KEY_LIMIT:
        raise click.BadParameter(f"a whole number from 1 to {MAX_KEY_LIMIT}, or none")
    return number


_UNCHANGED = object()


def _limits(tokens_per_minute: int | None, tokens_per_day: int | None) -> dict[str, int | None]:
    asked = {"tokens-per-minute": tokens_per_minute, "tokens-per-day": tokens_per_day}
    return {name: value for name, value in asked.items() if value is not None}


def _limits_text(key: Any) -> str:
    from tenants.services.api_keys import key_limits_of

    limits = key_limits_of(key)
    return ",".join(f"{name}={value}" for name, value in limits.items()) or "-"


@keys.command("limit")
@click.argument("key_id")
@click.option(
    "--tokens-per-minute",
    callback=_limit_or_none,
    default=None,
    help="The key's own rate (a number), or none to lift it; not given: unchanged.",
)
@click.option(
    "--tokens-per-day",
    callback=_limit_or_none,
    default=None,
    help="The key's own day budget (a number), or none to lift it; not given: unchanged.",
)
def limit_key(key_id: str, tokens_per_minute: Any, tokens_per_day: Any) -> None:
    """Set or lift a key's own token limits (of any tenant, or a platform key)."""
    from tenants import NotFoundError
    from tenants.services.api_keys import find_api_key, set_api_key_limits

    asked = {"tokens-per-minute": tokens_per_minute, "tokens-per-day": tokens_per_day}
    limits = {name: value for name, value in asked.items() if value is not _UNCHANGED}
    if not limits:
        raise click.UsageError("give --tokens-per-minute or --tokens-per-day (N, or none)")

    async def change(session: Any) -> str:
        found = await find_api_key(session, key_id)
        if found is None:
            raise NotFoundError(f"API key {key_id!r} not found")
        key = await set_api_key_limits(session, found[0].tenant, key_id, limits, actor=CLI_ACTOR)
        return f"key {key_id}: limits {_limits_text(key)}"

    click.echo(_run_on_database(change), err=True)


@keys.command("revoke")
@click.argument("key_id")
def revoke_key(key_id: str) -> None:
    """Revoke one key (of any tenant, or a platform key) by its id."""
    from tenants import NotFoundError
    from tenants.services.api_keys import find_api_key, revoke_api_key

    async def revoke(session: Any) -> str:
        found = await find_api_key(session, key_id)
        if found is None:
            raise NotFoundError(f"API key {key_id!r} not found")
        key, principal = found
        await revoke_api_key(session, key.tenant, key_id, actor=CLI_ACTOR)
        owner = "the platform" if key.tenant is None else f"tenant {key.tenant}"
        return f"revoked key {key_id} of {owner} ({principal.name})"

    click.echo(_run_on_database(revoke), err=True)


def _grace(_: click.Context, __: click.Parameter, value: str) -> int:
    match = _DURATION.fullmatch(value.strip())
    if match is None:
        raise click.BadParameter("write a duration such as 0, 600, 90m, 1h or 2d")
    seconds = int(match[1]) * _UNIT_SECONDS[match[2]]
    if seconds > MAX_GRACE:
        raise click.BadParameter("must be at most 7 days")
    return seconds


MAX_GRACE = 7 * 86400  # as the admin API allows


@keys.command("rotate")
@click.argument("key_id")
@click.option(
    "--grace",
    callback=_grace,
    default="1h",
    show_default=True,
    help="How long the old secret keeps working: 0 (not at all) to 7d, e.g. 90m, 1h, 2d.",
)
def rotate_key(key_id: str, grace: int) -> None:
    """Give a key (of any tenant, or a platform key) a new secret; the new token goes
    to stdout, once. Its id, roles and scopes stay; the old token works until the
    grace period ends."""
    from datetime import timedelta

    from gateway.auth.issue import rotate_api_key_secret
    from gateway.services import load_pepper
    from tenants import NotFoundError
    from tenants.services.api_keys import find_api_key

    pepper = load_pepper(Settings.from_env())

    async def rotate(session: Any) -> tuple[str, str]:
        found = await find_api_key(session, key_id)
        if found is None:
            raise NotFoundError(f"API key {key_id!r} not found")
        key, principal = found
        key, token = await rotate_api_key_secret(
            session,
            pepper,
            tenant=key.tenant,
            key_id=key_id,
            grace=timedelta(seconds=grace),
            actor=CLI_ACTOR,
        )
        owner = "the platform" if key.tenant is None else f"tenant {key.tenant}"
        until = key.previous_valid_until.isoformat() if key.previous_valid_until else "now"
        message = (
            f"rotated key {key_id} of {owner} ({principal.name}): the old token works "
            f"until {until}. The new token below is shown only now:"
        )
        return message, token

    message, token = _run_on_database(rotate)
    click.echo(message, err=True)
    click.echo(token)


PROGRESS_CHARGES = 20_000  # a report over more charges than this shows a progress bar


@main.command()
@click.option("--month", default=None, help="The UTC month, e.g. 2026-11 (default: this month).")
@click.option("--start", default=None, help="Or the first day, e.g. 2026-11-01 ...")
@click.option("--end", default=None, help="... and the last (included); at most 366 days.")
@click.option(
    "--per",
    type=click.Choice(["day", "week", "month"]),
    default="month",
    show_default=True,
    help="One row per UTC day, week (from Monday) or month.",
)
@click.option(
    "--group-by",
    default="",
    help="Comma-separated: tenant, queue, flavor, model, resource (default: none).",
)
@click.option("--tenant", default=None, help="Only this tenant's charges (default: every tenant).")
@click.option("--model", default=None, help="Only this model's charges.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
)
def report(
    month: str | None,
    start: str | None,
    end: str | None,
    per: str,
    group_by: str,
    tenant: str | None,
    model: str | None,
    fmt: str,
) -> None:
    """The chargeback report from the database (DATABASE_URL, or ./ignara.db): the
    GPU-hours and tokens charged, in amounts and, where prices are configured, money.

    \b
    ignara report --month 2026-11 --group-by tenant,resource
    ignara report --month 2026-11 --per week --group-by queue --format csv
    """
    from datetime import date

    from gateway.usage.controllers import month_days, parse_group_by
    from gateway.usage.report import render
    from quota.periods import BudgetPeriod
    from tenants.models._base import utcnow
    from tenants.services.charges import charge_report, count_charges
    from tenants.services.config import load_prices

    try:
        keys = parse_group_by(group_by)
        if month is not None and (start is not None or end is not None):
            raise ValueError("give either --month or --start and --end")
        if start is not None or end is not None:
            if start is None or end is None:
                raise ValueError("give both --start and --end")
            first, last = date.fromisoformat(start), date.fromisoformat(end)
            if not 0 <= (last - first).days < 366:
                raise ValueError("--start .. --end: from 1 to 366 days, end not before start")
        else:
            first, last = month_days(month or f"{utcnow():%Y-%m}")
    except ValueError as err:
        raise click.UsageError(str(err)) from None

    async def read(session: Any) -> str:
        prices = await load_prices(session)
        many = await count_charges(session, tenant=tenant, start=first, end=last)
        arguments: dict[str, Any] = {
            "tenant": tenant,
            "start": first,
            "end": last,
            "per": BudgetPeriod(per),
            "group_by": keys,
            "prices": prices,
            "model": model,
        }
        if many > PROGRESS_CHARGES:
            with click.progressbar(
                length=(last - first).days + 1,
                label=f"reading {many:,} charges",
                file=sys.stderr,
            ) as bar:
                result = await charge_report(session, **arguments, progress=bar.update)
        else:
            result = await charge_report(session, **arguments)
        return render(
            fmt,
            result,
            tenant=tenant,
            start=first,
            end=last,
            per=per,
            group_by=keys,
            currency=prices.currency,
        )

    click.echo(_run_on_database(read), nl=False)


@main.command()
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option(
    "--quota",
    "quota_file",
    required=True,
    type=click.Path(dir_okay=False),
    help="The quota configuration to replay on (see `ignara replay-quotas`).",
)
@click.option(
    "--policy",
    required=True,
    type=click.Choice(["static", "cohort", "cohort-fair"]),
    help="The policy the quota file is; a file that is another one is refused.",
)
@click.option(
    "--capacity-scale",
    type=float,
    default=1.0,
    show_default=True,
    help="Multiply every GPU quota by this (whole GPUs), to create contention.",
)
@click.option("--from", "start", default=None, help="Only jobs submitted from, e.g. 2017-10-01.")
@click.option("--to", "end", default=None, help="... until (a bare date includes that day).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N jobs.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Stop after this many wall seconds; the report says it was cut short.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Write summary.json and report.html here.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the whole summary as JSON.")
def replay(
    trace: str,
    quota_file: str,
    policy: str,
    capacity_scale: float,
    start: str | None,
    end: str | None,
    limit: int | None,
    timeout: float | None,
    out: str | None,
    as_json: bool,
) -> None:
    """Play a GPU job trace (Philly CSV: timestamp, duration, num_gpus, cluster) through
    the quota engine on a simulated clock; each team (cluster) is the cluster queue of
    that name. Exit 2 for unreadable input.

    \b
    ignara replay-quotas philly_2017_vc_nodes.csv --out quotas/
    ignara replay philly_2017_vc_jobs.csv --quota quotas/cohort.yaml --policy cohort \\
        --capacity-scale 0.25 --from 2017-10-01 --to 2017-11-30 --out replay/cohort
    """
    from quota.errors import QuotaError
    from quota.replay.metrics import summarize
    from quota.replay.report import comparison_markdown
    from quota.replay.run import engine_build, load_inputs, parse_window, write_outputs
    from quota.replay.simulation import replay as play_trace

    try:
        first, last = parse_window(start, end)
        inputs = load_inputs(
            trace, quota_file, policy, scale=capacity_scale, start=first, end=last, limit=limit
        )
    except QuotaError as err:
        click.echo(f"cannot replay: {err}", err=True)
        sys.exit(2)
    if not inputs.jobs:
        click.echo("cannot replay: no job of the trace is in the window", err=True)
        sys.exit(2)
    with click.progressbar(
        length=2 * len(inputs.jobs),
        label=f"replaying {len(inputs.jobs):,} jobs ({policy})",
        file=sys.stderr,
    ) as bar:
        result = play_trace(inputs.config, inputs.jobs, progress=bar.update, timeout=timeout)
    summary = summarize(result)
    summary["run"]["engine"] = engine_build()
    summary["inputs"] = {
        "trace": trace,
        "quota": quota_file,
        "capacity_scale": capacity_scale,
        "from": start,
        "to": end,
        "limit": limit,
        "timeout": timeout,
    }
    label = f"{policy} x{capacity_scale:g}"
    if out is not None:
        for path in write_outputs(out, summary, f"Replay of {trace}: {label}"):
            click.echo(f"wrote {path}", err=True)
    if as_json:
        click.echo(json.dumps(summary))
    else:
        click.echo(comparison_markdown([(label, summary)]), nl=False)


@main.command("replay-quotas")
@click.argument("sizes", type=click.Path(dir_okay=False))
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False),
    help="Write static.yaml, cohort.yaml and cohort-fair.yaml here.",
)
@click.option(
    "--scale",
    type=float,
    default=1.0,
    show_default=True,
    help="Nominal GPUs = nodes x 8 x this (or leave 1 and scale at replay time).",
)
def replay_quotas(sizes: str, out: str, scale: float) -> None:
    """Write one quota file per replay policy from the teams' sizes (a CSV of team and
    nodes, like Philly's `vc,node num`): static (no cohort), cohort (one cohort,
    borrowing, reclaim by preemption) and cohort-fair (the same with fair sharing)."""
    from pathlib import Path

    import yaml

    from quota.errors import QuotaError
    from quota.replay.policies import POLICIES, quota_document
    from quota.replay.trace import load_team_sizes

    try:
        teams = load_team_sizes(sizes)
        documents = {policy: quota_document(teams, policy, scale) for policy in POLICIES}
    except QuotaError as err:
        click.echo(f"cannot make quota files: {err}", err=True)
        sys.exit(2)
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    for policy, document in documents.items():
        path = directory / f"{policy}.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        click.echo(f"wrote {path}", err=True)


if __name__ == "__main__":  # pragma: no cover
    main()
