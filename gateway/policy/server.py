"""`OpaServer`: policies evaluated by an OPA server, through opa-python-client.

At `load` the gateway pushes its data and policies to the server (data first,
then modules in the order given, with `rego_compat=False` so nothing is
rewritten); per decision it POSTs the input to ``/v1/data/<path>``.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Mapping
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

import aiohttp

from gateway.policy.checks import decision_ref, json_input
from gateway.policy.decision import Decision, FailureKind
from gateway.policy.errors import EvaluationError, PolicyLoadError, UndefinedDocumentError
from gateway.policy.failclosed import decide_fail_closed
from gateway.policy.rego_tests import RegoTestResult, discover_tests, run_rego_tests

__all__ = ["OpaServer"]

_log = logging.getLogger(__name__)

_TEST_MODULE_PREFIX = "ignara-rego-tests/"


class _OpaClient(Protocol):
    """The part of `opa_client.AsyncOpaClient` (3.x) used here."""

    async def __aenter__(self) -> Any: ...

    async def close_connection(self) -> None: ...

    async def wait_for_ready(self, timeout: float = ..., interval: float = ...) -> bool: ...

    async def update_policy_from_string(
        self, new_policy: str, endpoint: str, rego_compat: bool = ...
    ) -> bool: ...

    async def update_or_create_data(self, new_data: dict[str, object], endpoint: str) -> bool: ...

    async def delete_policy(self, policy_name: str) -> bool: ...

    async def query_rule(
        self, input_data: dict[str, object], package_path: str, rule_name: str | None = ...
    ) -> Any: ...


# opa_client is imported on use (importlib): it ships no type information, and
# nothing of it (aiohttp sessions, requests) is needed unless this backend is chosen.


def _push_errors(*extra: type[Exception]) -> tuple[type[Exception], ...]:
    """What pushing to the server raises when it refuses or cannot be reached."""
    errors = importlib.import_module("opa_client.errors")
    names = ("ConnectionsError", "RegoParseError", "TypeException", "DeletePolicyError")
    client_errors = tuple(cast(type[Exception], getattr(errors, name)) for name in names)
    return (*client_errors, aiohttp.ClientError, OSError, *extra)


class OpaServer:
    """An OPA server at `url` (``http://opa:8181``).

    `timeout` bounds each decision (a slower answer is a deny); `startup_timeout`
    bounds `load` and `run_tests`, including waiting for the server to become
    healthy. `retries` is passed to the client, which retries refused
    connections and HTTP 500/502/504 with a short backoff.

    The client session belongs to the event loop that first uses it: create,
    load, query and close an `OpaServer` on one loop.

    Pushes are not one transaction: OPA refuses a module that does not compile
    and keeps its previous version, but data and the modules pushed before it
    are already replaced. `load` then raises `PolicyLoadError`; fix and load
    again. Modules this engine pushed earlier and no longer has are deleted.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 0.5,
        startup_timeout: float = 10.0,
        retries: int = 1,
        token: str | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"OPA URL {url!r} must be http(s)://host[:port]")
        if parts.path not in ("", "/") or parts.query:
            raise ValueError(f"OPA URL {url!r} must not have a path or query")
        self._url = url
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 8181)
        self._ssl = parts.scheme == "https"
        self._token = token
        self._retries = retries
        self._timeout = timeout
        self._startup_timeout = startup_timeout
        self._client: _OpaClient | None = None
        self._loaded = False
        self._pushed: set[str] = set()

    async def load(self, policies: Mapping[str, str], data: Mapping[str, object]) -> None:
        client = await self._connect()
        try:
            async with asyncio.timeout(self._startup_timeout):
                await client.wait_for_ready(timeout=self._startup_timeout, interval=0.1)
                await self._push_data(client, data)
                await self._push_policies(client, policies)
                for stale in sorted(self._pushed - set(policies)):
                    await client.delete_policy(stale)
        except TimeoutError as exc:
            raise PolicyLoadError(
                f"OPA server at {self._url} did not take the policies within "
                f"{self._startup_timeout:g}s"
            ) from exc
        except _push_errors() as exc:
            raise PolicyLoadError(f"OPA server at {self._url} refused the policies: {exc}") from exc
        self._pushed = set(policies)
        self._loaded = True

    async def decide(self, path: str, input: Mapping[str, object]) -> Decision:
        try:
            ref = decision_ref(path)
            document = json_input(input)
        except ValueError as exc:
            return Decision.fail_closed(FailureKind.INVALID_REQUEST, str(exc))
        client = self._client
        if client is None or not self._loaded:
            return Decision.fail_closed(FailureKind.NOT_LOADED, "no policies are loaded")
        return await decide_fail_closed(
            ref, self._query(client, ref, document), self._timeout, "OPA server"
        )

    async def run_tests(self, tests: Mapping[str, str]) -> list[RegoTestResult]:
        client = await self._connect()
        pushed = {
            f"{_TEST_MODULE_PREFIX}{module_id}": source for module_id, source in tests.items()
        }
        try:
            async with asyncio.timeout(self._startup_timeout):
                await self._push_policies(client, pushed)
                return await run_rego_tests(
                    discover_tests(tests), lambda ref: self._query(client, ref, {})
                )
        except TimeoutError as exc:
            raise PolicyLoadError(
                f"OPA server at {self._url} did not run the tests within {self._startup_timeout:g}s"
            ) from exc
        except _push_errors() as exc:
            raise PolicyLoadError(f"OPA server at {self._url} refused the tests: {exc}") from exc
        finally:
            await self._delete_quietly(client, pushed)

    async def ready(self) -> bool:
        return self._loaded

    async def close(self) -> None:
        client, self._client = self._client, None
        self._loaded = False
        if client is not None:
            await client.close_connection()

    async def _connect(self) -> _OpaClient:
        if self._client is None:
            module = importlib.import_module("opa_client")
            client = cast(
                _OpaClient,
                module.AsyncOpaClient(
                    host=self._host,
                    port=self._port,
                    ssl=self._ssl,
                    token=self._token,
                    retries=self._retries,
                    timeout=self._startup_timeout,
                ),
            )
            await client.__aenter__()
            self._client = client
        return self._client

    async def _push_data(self, client: _OpaClient, data: Mapping[str, object]) -> None:
        for key, value in data.items():
            if not isinstance(value, Mapping):
                raise PolicyLoadError(f"top-level policy data {key!r} must be an object")
            try:
                document = json_input(value)
            except ValueError as exc:
                raise PolicyLoadError(f"policy data {key!r}: {exc}") from exc
            await client.update_or_create_data(document, key)

    async def _push_policies(self, client: _OpaClient, policies: Mapping[str, str]) -> None:
        for module_id, source in policies.items():
            await client.update_policy_from_string(source, module_id, rego_compat=False)

    async def _query(self, client: _OpaClient, ref: str, document: dict[str, object]) -> object:
        """POST the input to ``/v1/data/<ref>``; the value of ``result``.

        Raises:
            UndefinedDocumentError: the answer has no ``result``.
            EvaluationError: HTTP error (code ``HTTP <status>``), non-JSON answer
                (``malformed_response``) or no connection (``unreachable``).
        """
        try:
            body = await client.query_rule(document, ref)
        except aiohttp.ContentTypeError as exc:
            raise EvaluationError("malformed_response", str(exc)) from exc
        except aiohttp.ClientResponseError as exc:
            raise EvaluationError(f"HTTP {exc.status}", exc.message) from exc
        except (aiohttp.ClientError, OSError, RuntimeError) as exc:
            raise EvaluationError("unreachable", str(exc) or type(exc).__name__) from exc
        except ValueError as exc:
            raise EvaluationError("malformed_response", str(exc)) from exc
        if not isinstance(body, Mapping):
            raise EvaluationError("malformed_response", "the answer is not a JSON object")
        if "result" not in body:
            raise UndefinedDocumentError(ref)
        value: object = body["result"]
        return value

    async def _delete_quietly(self, client: _OpaClient, policies: Mapping[str, str]) -> None:
        for module_id in policies:
            try:
                async with asyncio.timeout(self._startup_timeout):
                    await client.delete_policy(module_id)
            except _push_errors(TimeoutError) as exc:
                _log.warning("could not remove test module %s from OPA: %s", module_id, exc)
