"""The Litestar application factory: nothing connects before start-up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.routes import HTTPRoute
from litestar.types import HTTPScope, Message, Send

from gateway.admin import ModelController
from gateway.admin.live import LiveController
from gateway.admin.objects import ObjectController
from gateway.admin.queues import QueueController
from gateway.admin.summary import SummaryController
from gateway.admin.workloads import AdminWorkloadController
from gateway.auth import Identity, auth_middleware
from gateway.console import gateway_console
from gateway.errors import exception_handlers
from gateway.health import HealthController
from gateway.inference.controllers import InferenceController
from gateway.inference.routes import InferenceRoutes
from gateway.json_bodies import GatewayRequest
from gateway.observability import Observability
from gateway.observability.controller import MetricsController
from gateway.observability.logs import logging_config
from gateway.observability.metrics import UNMATCHED, method_label
from gateway.openapi import describe_api, openapi_config
from gateway.services import Services
from gateway.settings import Settings
from gateway.usage import UsageController
from gateway.workloads import EstimateController, WorkloadController

__all__ = ["MAX_BODY_BYTES", "GatewayApp", "create_app"]

MAX_BODY_BYTES = 1024 * 1024


class GatewayApp(Litestar):
    """Litestar, with the inference calls (:mod:`gateway.inference.routes`) answered
    before its router sees them: they are the hot path."""

    def __init__(
        self,
        *,
        inference_routes: InferenceRoutes,
        observe: Observability | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.inference_routes = inference_routes
        self.observe = observe or Observability()
        # Every HTTP request is timed and counted (and logged) here, around both the
        # inference front and Litestar's router, when metrics or access logs are on.
        self._watching = self.observe.metrics is not None or self.observe.access is not None
        self._allow = {
            route.path_format: ", ".join(sorted(route.methods)).encode()
            for route in self.routes
            if isinstance(route, HTTPRoute)
        }

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._watching and scope["type"] == "http":
            await self._watched(scope, receive, send)
        else:
            await self._route(scope, receive, send)

    async def _route(self, scope: Any, receive: Any, send: Any) -> None:
        kind = InferenceRoutes.kind_of(scope)
        if kind is not None:
            await self.inference_routes.serve(kind, cast("HTTPScope", scope), receive, send)
        elif scope.get("method") == "OPTIONS":
            await super().__call__(scope, receive, self._with_allow(scope, send))
        else:
            await super().__call__(scope, receive, send)

    async def _watched(self, scope: Any, receive: Any, send: Send) -> None:
        began = time.perf_counter()
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self._route(scope, receive, sending)
        except BaseException:
            status = status or 500
            raise
        finally:
            # Nothing sent and nothing raised: the client left first (nginx's 499).
            self._observed(scope, status or 499, time.perf_counter() - began)

    def _observed(self, scope: Any, status: int, seconds: float) -> None:
        if InferenceRoutes.kind_of(scope) is not None:
            route = InferenceRoutes.route_of(scope)
        else:  # Litestar's router notes the template it matched; never the raw path
            route = scope.get("path_template") or UNMATCHED
        method = method_label(scope.get("method", ""))
        metrics, access = self.observe.metrics, self.observe.access
        if metrics is not None:
            metrics.request(route, method, status, seconds)
        if access is not None:
            fields: dict[str, Any] = {}
            identity = scope.get("user")
            if isinstance(identity, Identity):
                fields = {"tenant": identity.tenant or None, "key_id": identity.key_id}
                fields["principal"] = identity.principal
            note = scope.get("ignara.access")
            if note is not None:
                fields |= note.fields()
            access.info(
                "http.request",
                method=method,
                route=route,
                path=scope.get("path", "")[:512],
                status=status,
                duration_ms=round(seconds * 1000, 3),
                **fields,
            )

    def _with_allow(self, scope: Any, send: Send) -> Send:
        """Litestar 2's OPTIONS answer lists only the methods of the first handler
        registered on a path (litestar-org/litestar#4169): put every method back."""

        async def sending(message: Message) -> None:
            allow = self._allow.get(scope.get("path_template", ""))
            if message["type"] == "http.response.start" and allow is not None:
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"allow"]
                message = {**message, "headers": [*headers, (b"allow", allow)]}
            await send(message)

        return sending


def create_app(
    settings: Settings | None = None, *, on_queues: Callable[[int], None] | None = None
) -> GatewayApp:
    """``on_queues``: told how many cluster queues each config it loads has."""
    services = Services.build(settings or Settings.from_env())
    services.on_queues = on_queues
    console, console_closers = gateway_console(services.settings, services.database)
    return GatewayApp(
        inference_routes=InferenceRoutes(
            services.authenticator,
            services.inference,
            database_outage=services.outages.database,
            observe=services.observe,
        ),
        observe=services.observe,
        route_handlers=[
            HealthController,
            MetricsController,
            WorkloadController,
            EstimateController,
            ModelController,
            LiveController,
            QueueController,
            SummaryController,
            AdminWorkloadController,
            ObjectController,  # with AdminController's routes
            UsageController,
            InferenceController,
            console,
        ],
        dependencies={
            "database": Provide(lambda: services.database, sync_to_thread=False),
            "backends": Provide(lambda: services.backends, sync_to_thread=False),
            "pepper": Provide(lambda: services.pepper, sync_to_thread=False),
            "policy": Provide(lambda: services.policy, sync_to_thread=False),
            "services": Provide(lambda: services, sync_to_thread=False),
        },
        middleware=[auth_middleware(services.authenticator)],
        exception_handlers=exception_handlers,
        logging_config=logging_config(services.settings),
        lifespan=[services.lifespan],
        request_max_body_size=MAX_BODY_BYTES,
        request_class=GatewayRequest,
        openapi_config=openapi_config(),
        on_startup=[describe_api],
        on_shutdown=console_closers,
        # "outages": the exception handlers count database outages there (gateway.errors).
        state=State({"services": services, "outages": services.outages}),
    )
