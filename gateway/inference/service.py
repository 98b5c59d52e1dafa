"""The rules of one inference call, in the order they apply:

1. The caller may call models at all (authorization policy, ``inference.call``).
2. The body is checked and its tokens estimated (:mod:`gateway.inference.calls`;
   a call that names no output bound is forwarded with the one it reserves), and
   so is ``X-Ignara-Priority``; an estimate over the config's
   ``inference.max_call_tokens`` is a 400.
3. The model exists and is open to the tenant, through the queue it spends
   (inference policy); the queue is the caller's ``X-Ignara-Queue`` or the first of
   the tenant's queues that holds token quota for the model's flavor. A call that
   needs more than the queue could ever get (its nominal quota plus what it may
   borrow) is a 400: no wait would help.
4. The estimate, its input corrected by what the upstream reported for earlier
   calls (:mod:`gateway.inference.estimates`), is reserved over the queue and every
   cohort above it, in one step; a refusal is a 429 (or, on a queue configured to
   wait, a place in line).
5. The call is forwarded; a failure before the response started is a 502/504 and
   the reservation is given back. Every answer from here on carries the
   ``x-ratelimit-*`` headers (:mod:`gateway.inference.ratelimits`). A stream
   that runs clearly past its reservation is ended there
   (:mod:`gateway.inference.overrun`).
6. After the response (or the stream) ends, the reservation is reconciled with
   the upstream's usage, and a usage record is queued for SQL.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

import msgspec

from gateway.auth import Identity
from gateway.authorization import principal_of
from gateway.inference.calls import Call, CallKind, estimate_text_tokens, parse_call
from gateway.inference.catalog import Catalog
from gateway.inference.errors import UpstreamError
from gateway.inference.estimates import InputCorrections, reserved_tokens
from gateway.inference.limits import check_call_size, check_fits, check_key_fits
from gateway.inference.overrun import OutputMeter
from gateway.inference.problems import InferenceError
from gateway.inference.ratelimits import (
    REQUESTS,
    QueueQuota,
    amounts_for,
    key_refusal,
    refusal_message,
)
from gateway.inference.registry import ModelRoute
from gateway.inference.sse import StreamAccountant, error_event
from gateway.inference.upstreams import ChunkStream, UpstreamClient, UpstreamResponse
from gateway.inference.waiting import WaitLine
from gateway.ledgers import Grant, KeyCharge, Ledger, LedgerUnavailableError, Refusal
from gateway.observability import Observability
from gateway.observability.access import AccessNote
from gateway.outages import Outage
from gateway.policy import AUTHZ, INFERENCE, Decision, PolicyEngine
from gateway.usage import UsageRecord, UsageRecorder
from quota.ledger import KEY_LEVEL

__all__ = ["Answer", "InferenceService", "StreamAnswer"]

log = logging.getLogger(__name__)

QUEUE_HEADER = "x-ignara-queue"
PRIORITY_HEADER = "x-ignara-priority"
MAX_PRIORITY = 1000
CLIENT_CLOSED = 499  # the status usage records give a call its caller abandoned
# A settle the ledger could not take is tried again (the reservation would otherwise
# stay charged against day and month budgets): first after this long, doubling up to
# the most, for at most this long in all, or until the gateway stops (then a live
# gateway's reclaim of this one's lease settles it, or its window and period end).
SETTLE_RETRY_FIRST_SECONDS = 0.25
SETTLE_RETRY_MAX_DELAY_SECONDS = 5.0
SETTLE_RETRY_SECONDS = 600.0
_PRIVATE = "x-ignara-"
_FORWARDED_RESPONSE_HEADERS = ("x-request-id",)
_decoder = msgspec.json.Decoder()


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    headers: dict[str, str]
    media_type: str = "application/json"


@dataclass(frozen=True, slots=True)
class StreamAnswer:
    status: int
    chunks: AsyncIterator[bytes]
    headers: dict[str, str]
    media_type: str = "text/event-stream"


@dataclass(frozen=True, slots=True)
class _Outcome:
    """How a call ended: the tokens it used, the status its caller got, from where."""

    prompt: int
    completion: int
    status: int
    endpoint: str | None
    streamed: bool = False
    reported: bool = False  # the prompt count is the upstream's, not an estimate


@dataclass(slots=True)
class _Context:
    """One admitted call on its way: who, what, where it is charged, since when."""

    identity: Identity
    call: Call
    route: ModelRoute
    quota: QueueQuota
    grant: Grant
    started: float
    prompt: int  # the input tokens reserved (the estimate, corrected)
    access: AccessNote | None = None  # filled in for the access log, when it is on

    @property
    def queue(self) -> str:
        return self.quota.queue

    def headers(self, *, given_back: bool = False) -> dict[str, str]:
        return self.quota.grant_headers(self.grant, given_back=given_back)


class InferenceService:
    def __init__(
        self,
        *,
        ledger: Ledger,
        client: UpstreamClient,
        policy: PolicyEngine,
        recorder: UsageRecorder,
        catalog: Catalog | None = None,
        clock: Callable[[], float] = time.time,
        ledger_outage: Outage | None = None,
        corrections: InputCorrections | None = None,
        cap_output: bool = True,
        cut_margin: float | None = 0.25,
        observe: Observability | None = None,
    ) -> None:
        self.ledger = ledger
        self.client = client
        self.policy = policy
        self.recorder = recorder
        self.catalog = catalog or Catalog()
        self.clock = clock  # the ledger's time (tests set it)
        self.ledger_outage = ledger_outage or Outage("token ledger")  # logged once, not per call
        self.waiting = WaitLine()
        # Bounds on overshoot: learned input corrections, the output bound forwarded
        # when a call names none, streams cut this far past their reservation.
        self.corrections = corrections or InputCorrections()
        self.cap_output = cap_output
        self.cut_margin = cut_margin
        self._settling: set[asyncio.Task[None]] = set()
        observe = observe or Observability()
        self.metrics = observe.metrics
        self._span = observe.span
        self._tracing = observe.tracing is not None
        self._draining = False  # in drain(): settles the ledger refuses are not tried again

    # -- the routes ----------------------------------------------------------------------

    async def models(self, identity: Identity) -> list[str]:
        """The models this caller may call (through its tenant's queues)."""
        await self._authorize(identity, "models.list")
        catalog = self.catalog
        names = []
        for route in catalog.registry.routes():
            quota = self._queue_for(catalog, identity.tenant, route.flavor, None)
            if (await self._admit(identity, route, quota.queue)).allow:
                names.append(route.model)
        return names

    async def handle(
        self,
        identity: Identity,
        kind: CallKind,
        raw: bytes,
        headers: Mapping[str, str],
        access: AccessNote | None = None,
    ) -> Answer | StreamAnswer:
        started = time.monotonic()
        span = self._span
        catalog = self.catalog
        with span("policy"):
            await self._authorize(identity, "inference.call")  # 1
            priority = _priority(headers.get(PRIORITY_HEADER))  # 2
            call = parse_call(
                kind, raw, catalog.settings.default_max_tokens, cap_output=self.cap_output
            )
            if access is not None:
                access.model = call.model
            check_call_size(call, catalog.settings)
            route, quota = await self._place(catalog, identity, call, headers)  # 3
            check_fits(call, quota, catalog.settings)
            if identity.key_limits:
                check_key_fits(call, identity, catalog.settings)
        if access is not None:
            access.queue = quota.queue
        prompt = self.corrections.reserved_prompt(call, quota.queue)
        note = _note(identity, call, prompt)
        key = _key_limits(identity)
        attributes = {"ignara.queue": quota.queue, "ignara.model": call.model}
        with span("reservation", attributes if self._tracing else None):
            grant = await self._reserve(catalog, quota, call, prompt, priority, note, key)  # 4
        context = _Context(identity, call, route, quota, grant, started, prompt, access)
        try:
            with span("upstream"):
                return await self._forward(context, kind, _forwarded(headers))  # 5, 6
        except asyncio.CancelledError:
            # The caller left (or the server stops) before an answer: nothing was used.
            self._background(self._give_back(context, CLIENT_CLOSED))
            raise

    async def _forward(
        self, context: _Context, kind: CallKind, headers: dict[str, str]
    ) -> Answer | StreamAnswer:
        metrics = self.metrics
        began = time.monotonic()
        try:
            response = await self.client.forward(
                context.route, kind.path, context.call.body, headers
            )
        except UpstreamError as err:
            if metrics is not None:
                metrics.upstream_error(context.call.model, None, err.code)
            await self._give_back(context, err.http_status)
            raise _upstream_problem(err, context) from None
        if metrics is not None:
            base_url = response.endpoint.base_url
            metrics.upstream(context.call.model, base_url, time.monotonic() - began)
            if response.status >= 400:
                code = f"http_{response.status // 100}xx"
                metrics.upstream_error(context.call.model, base_url, code)
        if response.chunks is not None:
            return await self._stream(context, response, response.chunks)
        return await self._whole(context, response)

    async def drain(self) -> None:
        """Wait for the accounting of finished streams (at shutdown): settles the ledger
        refuses meanwhile are not tried again."""
        self._draining = True
        try:
            if self._settling:
                await asyncio.gather(*self._settling, return_exceptions=True)
        finally:
            self._draining = False

    # -- 1 and 3: policy ----------------------------------------------------------------

    async def _authorize(self, identity: Identity, action: str) -> None:
        decision = await self._decide(
            # What the policy reads but the principal's name (which only words a reason).
            (AUTHZ, identity.tenant, identity.roles, identity.scopes, action),
            AUTHZ,
            lambda: {
                "principal": principal_of(identity),
                "action": action,
                "resource": {"tenant": identity.tenant},
            },
        )
        if not decision.allow:
            raise InferenceError(
                403, "permission_error", "; ".join(decision.reasons), code="forbidden"
            )

    async def _place(
        self, catalog: Catalog, identity: Identity, call: Call, headers: Mapping[str, str]
    ) -> tuple[ModelRoute, QueueQuota]:
        route = catalog.route(call.model)
        if route is None:
            raise _no_such_model(call.model)
        asked = headers.get(QUEUE_HEADER)
        quota = self._queue_for(catalog, identity.tenant, route.flavor, asked)
        decision = await self._admit(identity, route, quota.queue)
        if not decision.allow:
            if any(_closes_model(reason, route) for reason in decision.reasons):
                raise _no_such_model(call.model)  # as OpenAI: never confirm it exists
            raise InferenceError(
                403, "permission_error", "; ".join(decision.reasons), code="policy_denied"
            )
        if not quota.resources:
            raise InferenceError(
                403,
                "permission_error",
                f"queue {quota.queue!r} holds no token quota for flavor {route.flavor!r} "
                f"of model {call.model!r}",
                code="no_quota",
            )
        return route, quota

    def _queue_for(
        self, catalog: Catalog, tenant: str, flavor: str, asked: str | None
    ) -> QueueQuota:
        """The queue asked for (the policy says whether it is the tenant's), else the
        first of the tenant's queues with token quota for the flavor, else its first;
        with the inference resources that queue limits for the flavor."""
        if asked is not None:
            return self._quota(catalog, asked[:63], flavor)
        queues = catalog.tenant_queues.get(tenant, ())
        for queue in queues:
            if (quota := self._quota(catalog, queue, flavor)).resources:
                return quota
        return self._quota(catalog, queues[0] if queues else "", flavor)

    def _quota(self, catalog: Catalog, queue: str, flavor: str) -> QueueQuota:
        """The queue's quota for the flavor, kept for the config's life if it has any
        (names that are no queue, from a header, are not kept)."""
        quota = catalog.quotas.get((queue, flavor))
        if quota is None:
            quota = QueueQuota.of(self.ledger, queue, flavor)
            if quota.resources:
                catalog.quotas[(queue, flavor)] = quota
        return quota

    async def _admit(self, identity: Identity, route: ModelRoute, queue: str) -> Decision:
        return await self._decide(
            (INFERENCE, identity.tenant, route.model, queue),
            INFERENCE,
            lambda: {"tenant": identity.tenant, "model": route.model, "queue": queue},
            keep=queue in self.catalog.assigned_queues,
        )

    async def _decide(
        self,
        key: tuple[object, ...],
        entry: str,
        policy_input: Callable[[], dict[str, Any]],
        *,
        keep: bool = True,
    ) -> Decision:
        """The policy's decision, asked once per config (the input is built only then);
        ``keep=False`` for a key a caller chose freely, which is asked every time."""
        decisions = self.catalog.decisions
        decision = decisions.get(key)
        if decision is None:
            decision = await self.policy.decide(entry, policy_input())
            if decision.failure is None and keep:
                decisions[key] = decision
        return decision

    # -- 4: quota ----------------------------------------------------------------------

    async def _reserve(
        self,
        catalog: Catalog,
        quota: QueueQuota,
        call: Call,
        prompt: int,
        priority: int,
        note: str | None = None,
        key_limits: tuple[str, dict[str, int]] | None = None,
    ) -> Grant:
        queue, flavor = quota.queue, quota.flavor
        limits = (limit for resource, limit in quota.limits.items() if resource != REQUESTS)
        tokens = reserved_tokens(call, prompt, limits)
        amounts = amounts_for(quota.resources, tokens)
        max_wait = catalog.max_wait.get(queue)
        key = None
        if key_limits is not None:  # the same tokens at the key's own level
            key_id, cap = key_limits
            key = KeyCharge(key_id, cap, dict.fromkeys(cap, tokens))

        metrics = self.metrics

        def attempt() -> Awaitable[Grant | Refusal]:
            reserving = self.ledger.reserve(
                queue, flavor, amounts, now=self.clock(), note=note, key=key
            )
            return reserving if metrics is None else _timed(reserving, metrics.ledger_reserve)

        began = self.ledger_outage.now()
        try:
            if max_wait is not None and self.waiting.waiting(queue, flavor):
                result = await self.waiting.wait(queue, flavor, priority, max_wait, attempt)
            else:
                result = await attempt()
                # A key's own limit is not waited for in its queue's line (waiting.py).
                if (
                    isinstance(result, Refusal)
                    and max_wait is not None
                    and result.level != KEY_LEVEL
                ):
                    result = await self.waiting.wait(queue, flavor, priority, max_wait, attempt)
        except LedgerUnavailableError as err:
            # Fail closed: without the shared ledger no quota can be checked.
            self.ledger_outage.failed(err)
            raise InferenceError(
                503,
                "api_error",
                "the quota ledger is unavailable; retry shortly",
                code="ledger_unavailable",
                headers={"retry-after": "1"},
            ) from None
        self.ledger_outage.recovered(began)
        if isinstance(result, Refusal) and result.level == KEY_LEVEL and key is not None:
            raise key_refusal(queue, key, result)
        if isinstance(result, Refusal):
            if metrics is not None:
                metrics.rate_limited.labels(result.level, result.resource).inc()
            raise InferenceError(
                429,
                "requests" if result.resource == REQUESTS else "tokens",  # as OpenAI
                refusal_message(queue, result),
                code="rate_limit_exceeded",
                headers=quota.refusal_headers(result),
                detail={
                    "level": result.level,
                    "name": result.name,
                    "queue": queue,
                    "flavor": result.flavor,
                    "resource": result.resource,
                    "requested": result.requested,
                    "available": max(0, result.available),
                    "retry_after_seconds": round(result.retry_after, 3),
                },
            )
        return result

    # -- 5 and 6: the answer and its accounting ---------------------------------------------

    async def _whole(self, context: _Context, response: UpstreamResponse) -> Answer:
        body = response.body or b""
        if response.status >= 400:
            await self._give_back(context, response.status, response.endpoint.base_url)
            headers = {**_answer_headers(response), **context.headers(given_back=True)}
            return Answer(response.status, body, headers, _media(response))
        try:
            document = _decoder.decode(body)
        except msgspec.DecodeError:
            document = None
        if not isinstance(document, dict):
            if self.metrics is not None:
                self.metrics.upstream_error(
                    context.call.model, response.endpoint.base_url, "malformed"
                )
            await self._give_back(context, 502, response.endpoint.base_url)
            raise InferenceError(
                502,
                "api_error",
                f"the upstream for model {context.call.model!r} sent a malformed response",
                code="upstream_malformed",
                headers=context.headers(given_back=True),
            )
        # Charged as reported, past the reservation too: a whole answer cannot be cut.
        reported = _reported_usage(document.get("usage"))
        prompt, completion = reported or (
            self._input_estimate(context),
            _completion_estimate(document),
        )
        # The answer does not wait for the accounting: one round trip less per call.
        endpoint = response.endpoint.base_url
        outcome = _Outcome(prompt, completion, response.status, endpoint, False, bool(reported))
        self._settle_later(context, outcome)
        headers = {**_answer_headers(response), **context.headers()}
        return Answer(response.status, body, headers, _media(response))

    async def _stream(
        self, context: _Context, response: UpstreamResponse, chunks: ChunkStream
    ) -> Answer | StreamAnswer:
        endpoint = response.endpoint.base_url
        metrics = self.metrics
        try:
            first = await anext(chunks, b"")
        except UpstreamError as err:
            if metrics is not None:
                metrics.upstream_error(context.call.model, endpoint, err.code)
            await self._give_back(context, err.http_status, endpoint)
            raise _upstream_problem(err, context) from None
        if metrics is not None:
            metrics.time_to_first_token(context.call.model, time.monotonic() - context.started)
        headers = {**_answer_headers(response), **context.headers()}
        return StreamAnswer(response.status, self._relay(context, first, chunks, endpoint), headers)

    async def _relay(
        self, context: _Context, first: bytes, chunks: ChunkStream, endpoint: str
    ) -> AsyncIterator[bytes]:
        """Pass the stream on; account for it however it ends (done, broken, or the
        client gone, which cancels this generator and so closes the upstream)."""
        accountant = StreamAccountant(
            strip_usage=not context.call.wants_usage_chunk, meter=self._meter(context)
        )
        status = 200
        checkpoint = _Checkpoints(self.ledger, context)
        try:
            out = accountant.feed(first)
            if accountant.cut:  # past its reservation: stop the upstream, end the stream
                await chunks.aclose()
            if out:
                yield out
            async for chunk in chunks:
                out = accountant.feed(chunk)
                if accountant.cut:
                    await chunks.aclose()
                if out:
                    yield out
                checkpoint.maybe(accountant.completion_estimate)
            rest = accountant.flush()
            if rest:
                yield rest
        except UpstreamError as err:
            status = err.http_status
            if self.metrics is not None:
                self.metrics.upstream_error(context.call.model, endpoint, err.code)
            yield error_event(err.message, "api_error", err.code)
        finally:
            await chunks.aclose()
            reported = _reported_usage(accountant.usage)
            prompt = self._input_estimate(context)
            prompt, completion = reported or (prompt, accountant.completion_estimate)
            # In a task of its own: a client that left cancels this generator, and
            # awaiting here would be cancelled with it.
            outcome = _Outcome(prompt, completion, status, endpoint, True, bool(reported))
            self._settle_later(context, outcome)

    def _meter(self, context: _Context) -> OutputMeter | None:
        """What counts a stream's output and cuts it past its reservation (or nothing)."""
        call = context.call
        if self.cut_margin is None:
            return None
        return OutputMeter(
            reserved=call.completion_tokens,
            margin=self.cut_margin,
            chat=call.kind is CallKind.CHAT,
            prompt=lambda: self._input_estimate(context),
            usage_chunk=call.wants_usage_chunk,
        )

    def _input_estimate(self, context: _Context) -> int:
        """A call's input, for a stream the upstream never reported: what it reserved,
        or more if the correction learned meanwhile (from calls that ended first)."""
        return max(context.prompt, self.corrections.reserved_prompt(context.call, context.queue))

    def _settle_later(self, context: _Context, outcome: _Outcome) -> None:
        if context.access is not None:
            context.access.prompt_tokens = outcome.prompt
            context.access.completion_tokens = outcome.completion
        self._background(self._settle(context, outcome))

    def _background(self, accounting: Coroutine[Any, Any, None]) -> None:
        """Account off the request path; :meth:`drain` waits for what is still running."""
        task = asyncio.get_running_loop().create_task(accounting)
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _settle(self, context: _Context, outcome: _Outcome) -> None:
        grant = context.grant
        used = outcome.prompt + outcome.completion
        resources = grant.resources if grant.key_amounts else grant.amounts
        with self._span("settle"):
            await self._settle_retrying(grant, amounts_for(resources, used))
        if used < context.prompt + context.call.completion_tokens:
            self.waiting.notify(context.queue, grant.flavor)
        if outcome.reported:
            estimate = context.call.prompt_tokens
            self.corrections.learn(
                context.call.model, context.queue, estimated=estimate, reported=outcome.prompt
            )
        self._record(context, outcome)

    async def _give_back(self, context: _Context, status: int, endpoint: str | None = None) -> None:
        """The call produced nothing: the whole reservation goes back."""
        nothing = dict.fromkeys(context.grant.resources, 0)
        if context.access is not None:
            context.access.prompt_tokens = context.access.completion_tokens = 0
        if not await self._reconcile(context.grant, nothing):
            self._background(self._settle_retrying(context.grant, nothing))
        self.waiting.notify(context.queue, context.grant.flavor)
        self._record(context, _Outcome(0, 0, status, endpoint, context.call.stream))

    async def _reconcile(self, grant: Grant, actual: Mapping[str, int]) -> bool:
        """Settle ``grant`` at ``actual``; False if the ledger could not be reached. A
        settle is taken once: one the ledger took though its answer was lost settles
        nothing more when tried again."""
        began = time.monotonic()
        try:
            await self.ledger.reconcile(grant, actual, now=self.clock())
            if self.metrics is not None:
                self.metrics.ledger_settle.observe(time.monotonic() - began)
        except LedgerUnavailableError as err:
            self.ledger_outage.failed(err)
            return False
        return True

    async def _settle_retrying(self, grant: Grant, actual: Mapping[str, int]) -> None:
        """Settle ``grant``, trying again while the ledger cannot be reached."""
        delay = SETTLE_RETRY_FIRST_SECONDS
        give_up = time.monotonic() + SETTLE_RETRY_SECONDS
        while not await self._reconcile(grant, actual):
            if self._draining or time.monotonic() + delay > give_up:
                log.warning(
                    "reservation %s of queue %s left unsettled: the token ledger is unreachable",
                    grant.id,
                    grant.queue,
                )
                return
            await asyncio.sleep(delay)
            delay = min(2 * delay, SETTLE_RETRY_MAX_DELAY_SECONDS)

    def _record(self, context: _Context, outcome: _Outcome) -> None:
        identity = context.identity
        if self.metrics is not None:
            self.metrics.charged(
                identity.tenant,
                context.queue,
                context.call.model,
                outcome.prompt,
                outcome.completion,
            )
        self.recorder.record(
            UsageRecord(
                tenant=identity.tenant,
                principal=identity.principal,
                queue=context.queue,
                model=context.call.model,
                flavor=context.route.flavor,
                status=outcome.status,
                prompt_tokens=outcome.prompt,
                completion_tokens=outcome.completion,
                latency_ms=round((time.monotonic() - context.started) * 1000),
                streamed=outcome.streamed,
                api_key_id=identity.key_id,
                endpoint=outcome.endpoint,
                reservation=context.grant.id,
            )
        )


def _key_limits(identity: Identity) -> tuple[str, dict[str, int]] | None:
    """The caller's API key and its own limits (None: it has none, and the ledger does
    no more than for the queue alone)."""
    if not identity.key_limits or identity.key_id is None:
        return None
    return identity.key_id, dict(identity.key_limits)


async def _timed(step: Awaitable[Any], histogram: Any) -> Any:
    """``step``'s result; its time observed into ``histogram``."""
    began = time.monotonic()
    try:
        return await step
    finally:
        histogram.observe(time.monotonic() - began)


def _reported_usage(usage: Any) -> tuple[int, int] | None:
    """(prompt, completion) tokens from the upstream's ``usage``, if it has them."""
    if isinstance(usage, dict):
        prompt = usage.get("prompt_tokens")
        if _is_count(prompt):
            completion = usage.get("completion_tokens", 0)
            if not _is_count(completion):
                total = usage.get("total_tokens")
                completion = total - prompt if _is_count(total) and total >= prompt else 0
            return prompt, completion
    return None


def _completion_estimate(document: dict[str, Any]) -> int:
    chars = 0
    for choice in document.get("choices") or ():
        if isinstance(choice, dict):
            message = choice.get("message")
            text = message.get("content") if isinstance(message, dict) else choice.get("text")
            if isinstance(text, str):
                chars += len(text)
    return estimate_text_tokens(chars)


def _is_count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _priority(raw: str | None) -> int:
    if raw is None:
        return 0
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not -MAX_PRIORITY <= value <= MAX_PRIORITY:
        raise InferenceError(
            400,
            "invalid_request_error",
            f"{PRIORITY_HEADER} must be an integer from {-MAX_PRIORITY} to {MAX_PRIORITY}",
            code="invalid_priority",
        )
    return value


def _forwarded(headers: Mapping[str, str]) -> dict[str, str]:
    """The caller's headers minus the gateway's own (the client drops hop-by-hop ones)."""
    return {name: value for name, value in headers.items() if not name.startswith(_PRIVATE)}


def _answer_headers(response: UpstreamResponse) -> dict[str, str]:
    return {
        name: response.headers[name]
        for name in _FORWARDED_RESPONSE_HEADERS
        if name in response.headers
    }


def _media(response: UpstreamResponse) -> str:
    return response.headers.get("content-type", "application/json")


def _closes_model(reason: str, route: ModelRoute) -> bool:
    """The policy's reason says the model (or its flavor) is not the tenant's to use."""
    return reason.startswith(
        (f'model "{route.model}" is not open', f'flavor "{route.flavor}" of model')
    )


def _no_such_model(model: str) -> InferenceError:
    return InferenceError(
        404,
        "invalid_request_error",
        f"The model `{model}` does not exist or you do not have access to it.",
        code="model_not_found",
        param="model",
    )


def _upstream_problem(err: UpstreamError, context: _Context) -> InferenceError:
    return InferenceError(
        err.http_status,
        "api_error",
        err.message,
        code=err.code,
        headers=context.headers(given_back=True),
    )


# -- what another gateway needs to record a call should this one die -----------------------

CHECKPOINT_SECONDS = 1.0  # how often a stream notes its tokens so far in the ledger


class _Checkpoints:
    """Notes a stream's tokens so far in its reservation, at most once a second (fire
    and forget): should this gateway die, another settles the call at that."""

    __slots__ = ("_context", "_ledger", "_next")

    def __init__(self, ledger: Ledger, context: _Context) -> None:
        self._ledger = ledger
        self._context = context
        self._next = time.monotonic() + CHECKPOINT_SECONDS

    def maybe(self, completion: int) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + CHECKPOINT_SECONDS
            self._ledger.checkpoint(self._context.grant, self._context.prompt + completion)


def _note(identity: Identity, call: Call, prompt: int) -> str:
    """What the ledger keeps of the call for :mod:`gateway.usage.reclaim` (JSON)."""
    return msgspec.json.encode(
        {
            "tenant": identity.tenant,
            "principal": identity.principal,
            "key": identity.key_id,
            "model": call.model,
            "prompt": prompt,  # the input reserved (the estimate, corrected)
            "stream": call.stream,
        }
    ).decode()
