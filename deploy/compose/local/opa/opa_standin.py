"""The compose stack's OPA stand-in (see the Dockerfile beside this): the OPA REST API the
gateway uses, over OPA's real Go engine. Takes OPA's own ``run --server --addr=HOST:PORT``
arguments, so compose.yaml's ``command`` serves both; other OPA flags are ignored."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from fake_opa_server import FakeOpaServer  # type: ignore[import-not-found]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run", nargs="?")
    parser.add_argument("--server", action="store_true")
    parser.add_argument("--addr", default="0.0.0.0:8181")
    args, _ignored = parser.parse_known_args(argv)
    host, _, port = args.addr.rpartition(":")
    server = FakeOpaServer(host or "0.0.0.0", int(port)).start()
    print(f"OPA stand-in (not OPA's server) on {server.url}", file=sys.stderr, flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    stopped.wait()
    server.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
