"""What the handlers share, built once per app and connected in its lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from litestar import Litestar
from sqlalchemy.engine import make_url

from gateway.admission import AdmissionRuntime
from gateway.admission.snapshot import ChargedLoader
from gateway.admission.state import LiveBoard
from gateway.auth import ANY_TENANT, Authenticator, OidcSettings, OidcVerifier
from gateway.auth.store import CachedApiKeyStore, SqlApiKeyStore
from gateway.backends import Backend, LocalBackend
from gateway.backends.registry import BackendRegistry
from gateway.background import Rounds
from gateway.inference import HealthChecker, Timeouts, UpstreamClient
from gateway.inference.catalog import Catalog, build_registry
from gateway.inference.estimates import InputCorrections
from gateway.inference.service import InferenceService
from gateway.ledgers import LedgerUnavailableError, create_ledger
from gateway.newest_ids import NewestIds
from gateway.observability import Observability
from gateway.observability.policy import TimedPolicy
from gateway.outages import Outages, database_unavailable
from gateway.policy import PolicyEngine, create_policy_engine, load_policies
from gateway.policy.data import config_version, credentials_version, policy_data
from gateway.settings import ServerSettings, Settings
from gateway.stream_slots import StreamSlots
from gateway.usage import UsageRecorder
from gateway.usage.budgets import SpentBudgets, spent, spent_budgets
from gateway.usage.reclaim import Reclaimer
from quota.ledger import BUDGET_RESOURCES
from quota.model import QuotaConfig, iter_quotas
from tenants import Database
from tenants.config_file import LOCAL_BACKEND
from tenants.models._base import utcnow
from tenants.services.api_keys import has_platform_admin
from tenants.services.charges import charged_hours
from tenants.services.config import (
    load_backend_config,
    load_inference_settings,
    load_models,
    load_quota_config,
)
from tenants.services.key_activity import expire_idle_keys
from tenants.services.tenants import live_tenants

__all__ = [
    "CREATE_ADMIN_COMMAND",
    "Services",
    "create_private_database",
    "load_pepper",
    "oidc_verifier",
    "stream_slots",
]

log = logging.getLogger(__name__)

CREATE_ADMIN_COMMAND = "ignara keys create --admin --principal <your-name>"
KEY_EXPIRY_ACTOR = "ignara (idle-key policy)"  # the audit log's actor for expired keys


def stream_slots(server: ServerSettings) -> StreamSlots:
    """The event streams a gateway with these settings lets be open at once."""
    return StreamSlots(server.event_streams_per_tenant, server.event_streams, platform=ANY_TENANT)


@dataclass
class Services:
    """What the handlers share: built by :func:`create_app`, connected at start-up."""

    settings: Settings
    database: Database
    authenticator: Authenticator
    pepper: bytes
    policy: PolicyEngine
    api_keys: CachedApiKeyStore
    upstreams: UpstreamClient
    recorder: UsageRecorder
    inference: InferenceService
    health: HealthChecker
    backends: dict[str, Backend] = field(default_factory=dict)
    # Flavor -> the backend its admitted work goes to (the rest: local); and each cluster
    # queue's flavors, to know where a workload naming no backend may run.
    flavor_backends: dict[str, str] = field(default_factory=dict)
    queue_groups: dict[str, tuple[tuple[frozenset[str], tuple[str, ...]], ...]] = field(
        default_factory=dict
    )
    runtime: AdmissionRuntime | None = None
    config_version: int | None = None
    credentials_version: int | None = None
    # What the queues had spent of their budgets before this process started, read
    # once from the usage records for an in-process ledger (gateway.usage.budgets).
    spent_before_start: SpentBudgets | None = None
    outages: Outages = field(default_factory=Outages)  # logged once each, not per call
    _registry: BackendRegistry | None = None
    reclaimer: Reclaimer | None = None  # settles and records the calls of dead gateways
    # What each queue was charged of its GPU-hour budgets this period (the ledger).
    charged_loader: ChargedLoader | None = None
    # The live quota state (gateway.admission.state), published by the admission leader.
    live: LiveBoard | None = None
    # Metrics, traces and event logs (gateway.observability).
    observe: Observability = field(default_factory=Observability)
    # The event streams open now, and how many may be (gateway.stream_slots).
    stream_slots: StreamSlots = field(default_factory=lambda: stream_slots(ServerSettings()))
    # The newest event and audit ids, read once for all of this process's event streams
    # (gateway.newest_ids); None: each stream polls on its own.
    newest_ids: NewestIds | None = None
    # Told how many cluster queues each loaded config has (`ignara serve` tunes the
    # collector by it: gateway.process); None: nobody asks.
    on_queues: Callable[[int], None] | None = None

    @classmethod
    def build(cls, settings: Settings) -> Services:
        create_private_database(settings.database.url)
        database = Database(settings.database.url)
        pepper = load_pepper(settings)
        outages = Outages()
        api_keys = CachedApiKeyStore(
            SqlApiKeyStore(database),
            ttl=settings.auth.key_cache_seconds,
            stale_for=settings.auth.key_stale_seconds,
            max_wait=settings.auth.key_lookup_timeout,
            outage=outages.database,
        )
        authenticator = Authenticator(
            api_keys=api_keys,
            pepper=pepper,
            oidc=oidc_verifier(settings),
            bootstrap_key=settings.auth.admin_key,
        )
        local = LocalBackend(
            Path(settings.backends.local_root), isolation=settings.backends.local_isolation
        )
        backends: dict[str, Backend] = {LOCAL_BACKEND: local}
        observe = Observability.build(settings)
        policy: PolicyEngine = create_policy_engine(
            settings.policy.opa_url, timeout=settings.policy.timeout_seconds
        )
        if observe.metrics is not None:
            policy = TimedPolicy(policy, observe.metrics.policy_duration)
        options = settings.inference
        upstreams = UpstreamClient(
            timeouts=Timeouts(
                connect=options.connect_timeout,
                first_byte=options.first_byte_timeout,
                total=options.total_timeout,
            )
        )
        recorder = UsageRecorder(database, outage=outages.database)
        # Nothing connects here: the ledger learns the quota tree at the first reload.
        ledger = create_ledger(
            options.redis_url,
            QuotaConfig(),
            prefix=options.ledger_prefix,
            timeout=options.redis_timeout,
        )
        # A shared ledger whose Redis lost its state rebuilds from the usage records.
        ledger.restore_from(lambda: spent(database))

        async def forget(ids: list[str]) -> None:  # recorded: the ledger keeps them no more
            try:
                await ledger.forget(ids)
            except LedgerUnavailableError as err:  # kept until their period ends
                log.debug("cannot drop %d recorded reservations: %s", len(ids), err)

        recorder.written_hook = forget
        reclaimer = Reclaimer(ledger, recorder, options.lease_seconds)
        inference = InferenceService(
            ledger=ledger,
            client=upstreams,
            policy=policy,
            recorder=recorder,
            ledger_outage=outages.redis,
            corrections=InputCorrections(max_factor=options.estimate_max_factor),
            cap_output=options.cap_output,
            cut_margin=options.stream_cut_margin,
            observe=observe,
        )
        health = HealthChecker(
            inference.catalog.registry, upstreams, interval=options.health_interval
        )
        return cls(
            settings,
            database,
            authenticator,
            pepper,
            policy,
            api_keys=api_keys,
            upstreams=upstreams,
            recorder=recorder,
            inference=inference,
            health=health,
            backends=backends,
            outages=outages,
            reclaimer=reclaimer,
            charged_loader=charged_hours,
            live=LiveBoard(database, charged=charged_hours),
            observe=observe,
            stream_slots=stream_slots(settings.server),
            newest_ids=NewestIds(database),
        )

    async def reload_config(self) -> None:
        """Load the policies, the quota ledger's tree and the inference catalog as the
        database now says (after any change), from one consistent snapshot."""
        async with self.database.snapshot() as session:
            version = await config_version(session)
            backend_config = await load_backend_config(session)
            declared = {LOCAL_BACKEND, *(b.name for b in backend_config.backends)}
            data = await policy_data(session, declared)
            quota = await load_quota_config(session)
            models = await load_models(session)
            inference = await load_inference_settings(session)
            tenants = await live_tenants(session)
            if self.spent_before_start is None and not self.inference.ledger.durable:
                self.spent_before_start = await spent_budgets(session)
        await self.registry.apply(backend_config)
        if self.on_queues is not None:
            self.on_queues(len(quota.cluster_queues))
        self.queue_groups = {
            queue.name: tuple(
                (frozenset(g.resources), tuple(f.name for f in g.flavors))
                for g in queue.resource_groups
            )
            for queue in quota.cluster_queues
        }
        # A deleted tenant's keys, cached here, stop at once (the policy drops it too).
        self.api_keys.clear()
        await self.policy.load(load_policies(Path(self.settings.policy.directory)), data)
        registry = build_registry(models, self.settings.inference.key_env)
        self.inference.catalog = Catalog(
            registry=registry,
            tenant_queues={t.name: tuple(t.queues) for t in tenants},
            settings=inference,
        )
        self.health.registry = registry
        began = self.outages.redis.now()
        try:
            await self.inference.ledger.update_config(quota)
            if self.spent_before_start is not None:
                spent = self.spent_before_start
                await self.inference.ledger.restore_budgets(
                    spent.spent, measured_at=spent.measured_at, keys=spent.key_days
                )
        except LedgerUnavailableError as err:
            # The config is stored and served; the shared ledger learns it when it is
            # back: leaving the version unset makes the watcher reload again.
            self.outages.redis.failed(err)
            return
        self.outages.redis.recovered(began)
        if version != self.config_version:
            self.observe.events.info("config.reloaded", version=version)
        self.config_version = version

    @property
    def registry(self) -> BackendRegistry:
        if self._registry is None:
            self._registry = BackendRegistry(
                self.backends, self.flavor_backends, self.settings.backends.secret_env
            )
        return self._registry

    def backends_for(self, queue: str, resources: set[str]) -> list[str]:
        """Where a workload of ``queue`` asking for ``resources`` and naming no backend may
        run: the backends of the flavors it may be given (a flavor naming none: local)."""
        groups = self.queue_groups.get(queue, ())
        used = [flavors for names, flavors in groups if names & resources] or [
            flavors for _, flavors in groups
        ]
        found = {self.flavor_backends.get(f, LOCAL_BACKEND) for fs in used for f in fs}
        return sorted(found) or [LOCAL_BACKEND]

    def _lease_rounds(self) -> list[Rounds]:
        """With a shared ledger: renew this gateway's lease, reclaim dead ones' calls."""
        reclaimer, options = self.reclaimer, self.settings.inference
        if reclaimer is None or not self.inference.ledger.durable:
            return []
        return [
            Rounds(reclaimer.renew, interval=options.lease_seconds / 3, name="ignara-lease"),
            Rounds(reclaimer.round, interval=options.reclaim_interval, name="ignara-reclaim"),
        ]

    async def check_ledger_store(self) -> None:
        """Say at start what is wrong with the ledger's Redis settings: loudly when
        budgets live there and a restart would forget them."""
        try:
            warnings = await self.inference.ledger.store_warnings()
        except LedgerUnavailableError as err:
            log.warning("cannot check the token ledger's Redis settings: %s", err)
            return
        async with self.database.snapshot() as session:
            quota = await load_quota_config(session)
        budgets = any(
            fr.resource in BUDGET_RESOURCES
            for group in [q.resource_groups for q in quota.cluster_queues]
            + [c.resource_groups for c in quota.cohorts]
            for fr, _ in iter_quotas(group)
        )
        for warning in warnings:
            if budgets or "noeviction" in warning:
                log.warning("token ledger: %s", warning)
            else:
                log.info("token ledger: %s (no token budgets are configured)", warning)

    async def announce_isolation(self) -> None:
        """Probe the local backend's sandbox (a real job) and say in one line what holds."""
        for backend in self.backends.values():
            if isinstance(backend, LocalBackend):
                isolation = await asyncio.to_thread(backend.probe)
                log.log(isolation.severity, "local backend isolation: %s", isolation.describe())

    async def check_config(self) -> None:
        """Another replica may change the config: reload when the audit log moved; and
        forget cached keys when keys changed (a revocation applies within a second)."""
        began = self.outages.database.now()
        try:
            async with self.database.session() as session:
                version = await config_version(session)
                credentials = await credentials_version(session)
            if credentials != self.credentials_version:
                self.api_keys.clear()
                self.credentials_version = credentials
            if version != self.config_version:
                await self.reload_config()
        except Exception as err:  # the top of a background task: log, never die
            if database_unavailable(err):
                self.outages.database.failed(err)  # said once per outage, not every second
            else:
                log.exception("cannot reload the config; retrying")
            return
        self.outages.database.recovered(began)

    async def expire_idle_keys(self) -> None:
        """On the admission leader only (one replica expires, once): revoke the idle
        keys of tenants whose key policy says so (see
        :func:`tenants.services.key_activity.expire_idle_keys`)."""
        if self.runtime is None or not self.runtime.lock.held:
            return
        try:
            async with self.database.session() as session:
                expired = await expire_idle_keys(
                    session,
                    utcnow(),
                    default_idle_days=self.settings.auth.key_idle_days,
                    actor=KEY_EXPIRY_ACTOR,
                )
        except Exception as err:  # the top of a background task: log, never die
            if database_unavailable(err):
                self.outages.database.failed(err)
            else:
                log.exception("cannot expire idle keys; retrying next round")
            return
        for key in expired:
            self.api_keys.invalidate(key.key_id)
            self.observe.events.info(
                "key.expired", key_id=key.key_id, tenant=key.tenant, reason=key.revoked_reason
            )

    async def warn_without_admin(self) -> None:
        """Say at start when nobody could administer this gateway, and how to fix it."""
        if self.settings.auth.admin_key is not None:
            return
        async with self.database.session() as session:
            if await has_platform_admin(session):
                return
        log.warning(
            "no platform admin: IGNARA_ADMIN_KEY is unset and the database holds no "
            "platform admin key; create one with: %s",
            CREATE_ADMIN_COMMAND,
        )

    @asynccontextmanager
    async def lifespan(self, _: Litestar) -> AsyncIterator[None]:
        await self.announce_isolation()
        await self.database.migrate()
        await self.warn_without_admin()
        await self.reload_config()
        await self.check_ledger_store()
        await self.upstreams.start()
        await self.recorder.start()
        await self.health.start()
        watcher = Rounds(self.check_config, interval=1.0, name="ignara-config-watch")
        watcher.start()
        expiry = Rounds(
            self.expire_idle_keys,
            interval=self.settings.auth.key_expiry_interval,
            name="ignara-key-expiry",
        )
        self.runtime = AdmissionRuntime(
            self.database,
            self.backends,
            flavor_backends=self.flavor_backends,
            outage=self.outages.database,
            interval=self.settings.admission.interval,
            estimate_interval=self.settings.admission.estimate_interval,
            max_lost_runs=self.settings.admission.max_lost_runs,
            charged=self.charged_loader,
            board=self.live,
            observe=self.observe,
        )
        leases = self._lease_rounds()
        for rounds in leases:
            rounds.start()
        await self.runtime.start()
        expiry.start()
        try:
            yield
        finally:
            await expiry.stop()
            await watcher.stop()
            for rounds in leases:
                await rounds.stop()
            await self.health.stop()
            await self.runtime.stop()
            await self.inference.drain()
            await self.recorder.stop()
            if leases:  # every record written: nothing left for others to reclaim
                with contextlib.suppress(LedgerUnavailableError):
                    await self.inference.ledger.drop_lease()
            await self.upstreams.close()
            await self.inference.ledger.aclose()
            for backend in self.backends.values():
                await backend.close()
            await self.authenticator.aclose()
            await self.policy.close()
            await self.database.dispose()
            if self.observe.tracing is not None:  # what is still batched goes out now
                await asyncio.to_thread(self.observe.tracing.shutdown)


def oidc_verifier(settings: Settings) -> OidcVerifier | None:
    """An OIDC verifier when an issuer is configured; it needs audience and JWKS URI too."""
    auth = settings.auth
    if auth.oidc_issuer is None:
        return None
    if auth.oidc_audience is None or auth.oidc_jwks_uri is None:
        raise ValueError("OIDC_ISSUER needs OIDC_AUDIENCE and OIDC_JWKS_URI as well")
    return OidcVerifier(
        OidcSettings(
            issuer=auth.oidc_issuer,
            audience=auth.oidc_audience,
            jwks_uri=auth.oidc_jwks_uri,
            tenant_claim=auth.oidc_tenant_claim,
            roles_claim=auth.oidc_roles_claim,
        )
    )


def load_pepper(settings: Settings) -> bytes:
    """The API-key pepper: from the settings, or a random one kept in a private file."""
    if settings.auth.pepper:
        return settings.auth.pepper.encode()
    path = Path(settings.auth.pepper_file)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(secrets.token_urlsafe(32))
    return path.read_text().strip().encode()


def create_private_database(url: str) -> None:
    """Create a SQLite database file readable by this user only (SQLite itself follows the
    umask, and copies the file's mode to its journals); other databases: nothing to do."""
    parsed = make_url(url)
    path = parsed.database
    if parsed.get_backend_name() != "sqlite" or not path or path == ":memory:":
        return
    # The file exists (keep it as it is) or its directory does not (SQLite will say so).
    with contextlib.suppress(FileExistsError, FileNotFoundError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
