"""A local stand-in for an OPA server, for testing the `OpaServer` backend.

There is no `opa` binary here, so this speaks the part of OPA's REST API the
gateway uses and evaluates with OPA's real Go engine (opa-golib-python-bindings)
underneath:

    GET    /health                    200 {}
    PUT    /v1/policies/{id}          200 {} | 400 {"code": "invalid_parameter", "errors": [...]}
    DELETE /v1/policies/{id}          200 {} | 404
    PUT    /v1/data/{path}            204 (replaces the document at path)
    POST   /v1/data/{path}            200 {"result": ...} | 200 {} when undefined | 500 on error

Like OPA, a module that does not compile is refused and the previous set stays.
`delay` holds decision queries (POST) back, to test timeouts.
"""

from __future__ import annotations

import json
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from opa_bindings import OpaEngine, OpaError, OpaUndefinedError

__all__ = ["FakeOpaServer"]

_JSON = dict[str, Any]


class _Store:
    """Policies and data, and an engine built from them; rebuilt on each change."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.policies: dict[str, str] = {}
        self.data: _JSON = {}
        self.engine = OpaEngine()

    def replace(self, policies: dict[str, str], data: _JSON) -> None:
        """Compile the new state; on success swap it in. Raises OpaError."""
        engine = OpaEngine()
        try:
            for module_id, source in policies.items():
                engine.add_policy(module_id, source)
            engine.add_data(data)
            engine.eval_query("probe := true")
        except OpaError:
            engine.close()
            raise
        old, self.engine = self.engine, engine
        self.policies, self.data = policies, data
        old.close()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        if self.path.split("?")[0] == "/health":
            self._reply(HTTPStatus.OK, {})
        else:
            self._not_found()

    def do_PUT(self) -> None:
        body = self._body()
        if (policy_id := self._under("/v1/policies/")) is not None:
            self._put_policy(policy_id, body.decode())
        elif (path := self._under("/v1/data/")) is not None:
            self._put_data(path, json.loads(body))
        else:
            self._not_found()

    def do_DELETE(self) -> None:
        store = self.server.store
        policy_id = self._under("/v1/policies/")
        with store.lock:
            if policy_id is None or policy_id not in store.policies:
                self._not_found()
                return
            policies = {k: v for k, v in store.policies.items() if k != policy_id}
            store.replace(policies, store.data)
        self._reply(HTTPStatus.OK, {})

    def do_POST(self) -> None:
        path = self._under("/v1/data/")
        body = self._body()
        if path is None:
            self._not_found()
            return
        self.server.queries += 1
        time.sleep(self.server.delay)
        ref = path.strip("/").replace("/", ".")
        try:
            value = self.server.store.engine.eval_document(ref, json.loads(body).get("input"))
        except OpaUndefinedError:
            self._reply(HTTPStatus.OK, {})
        except OpaError as exc:
            self._reply(
                HTTPStatus.INTERNAL_SERVER_ERROR, {"code": "internal_error", "message": exc.message}
            )
        else:
            self._reply(HTTPStatus.OK, {"result": value})

    def _put_policy(self, policy_id: str, source: str) -> None:
        store = self.server.store
        with store.lock:
            try:
                store.replace({**store.policies, policy_id: source}, store.data)
            except OpaError as exc:
                error = {"code": exc.code, "message": exc.message}
                self._reply(
                    HTTPStatus.BAD_REQUEST,
                    {
                        "code": "invalid_parameter",
                        "message": "error(s) occurred while compiling module(s)",
                        "errors": [error],
                    },
                )
                return
        self._reply(HTTPStatus.OK, {})

    def _put_data(self, path: str, value: Any) -> None:
        store = self.server.store
        keys = [key for key in path.split("/") if key]
        with store.lock:
            data = json.loads(json.dumps(store.data))
            node = data
            for key in keys[:-1]:
                node = node.setdefault(key, {})
            if keys:
                node[keys[-1]] = value
            else:
                data = value
            store.replace(store.policies, data)
        self.send_response(HTTPStatus.NO_CONTENT)
        self.end_headers()

    def _under(self, prefix: str) -> str | None:
        path = self.path.split("?")[0]
        return path.removeprefix(prefix) if path.startswith(prefix) else None

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _not_found(self) -> None:
        self._reply(HTTPStatus.NOT_FOUND, {"code": "resource_not_found", "message": self.path})

    def _reply(self, status: HTTPStatus, body: _JSON) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # the default 5 makes concurrent clients wait on SYN retries

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, _Handler)
        self.store = _Store()
        self.delay = 0.0
        self.queries = 0

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (timeout tests) closes its socket mid-reply


class FakeOpaServer:
    """OPA's REST API on 127.0.0.1 at a free port (or ``host``, ``port``), served from a
    thread (deploy/compose/local/opa/ serves it as the compose stack's OPA stand-in).

    with FakeOpaServer() as opa:
        engine = OpaServer(opa.url)
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = _Server((host, port))
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def delay(self) -> float:
        """Seconds each decision query (POST /v1/data/...) waits before answering."""
        return self._server.delay

    @delay.setter
    def delay(self, seconds: float) -> None:
        self._server.delay = seconds

    @property
    def policy_ids(self) -> list[str]:
        return sorted(self._server.store.policies)

    @property
    def queries(self) -> int:
        return self._server.queries

    def start(self) -> FakeOpaServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self._server.store.engine.close()

    def __enter__(self) -> FakeOpaServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
