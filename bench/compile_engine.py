"""Build the admission engine's hot modules with mypyc, into a directory of their own.

    python -m bench.compile_engine --out .artifacts/mypyc

prints the directory to put first on ``PYTHONPATH``: a copy of ``quota/`` in which
the modules below are C extensions (the rest stays Python). The source is the same,
typed for ``mypy --strict``; only the interpreter overhead goes, about half of a
replay's time. ``make replay`` uses it; tests, ``make run`` and the gateway use the
Python modules. Kept out of the source tree on purpose: an extension module is
imported before a ``.py`` of the same name, so one left beside the source would
shadow every later edit. The build is redone only when a source file changed.

``tests/quota/test_compiled_engine.py`` builds it and requires the same replay,
decision for decision, from both.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from bench import builds

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "quota"

# The engine's cycle and what it calls. Not the configuration readers: their
# documents are decoded into classes that must stay Python classes.
MODULES = (
    "quota/model.py",
    "quota/resources.py",
    "quota/budgets.py",
    "quota/periods.py",
    "quota/tree.py",
    "quota/cache.py",
    "quota/queues.py",
    "quota/reasons.py",
    "quota/entry.py",
    "quota/partial.py",
    "quota/flavor_assigner.py",
    "quota/fair_sharing.py",
    "quota/fair_iterator.py",
    "quota/preemption/__init__.py",
    "quota/preemption/common.py",
    "quota/preemption/classical.py",
    "quota/preemption/fair.py",
    "quota/scheduler.py",
    "quota/engine.py",
    "quota/replay/simulation.py",
)


def source_digest() -> str:
    """A digest of every file of the package (and of the module list)."""
    digest = hashlib.sha256("\n".join(MODULES).encode())
    for path in sorted(PACKAGE.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".so":
            digest.update(str(path.relative_to(ROOT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def build(out: Path) -> Path:
    """Build into ``out`` unless it holds a build of the current source; returns the
    directory to put on ``PYTHONPATH``."""
    target = out / "src"
    digest = source_digest()
    if builds.is_current(out, digest, (target / "quota").is_dir):
        return target
    shutil.rmtree(out, ignore_errors=True)
    target.mkdir(parents=True)
    shutil.copytree(PACKAGE, target / "quota", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    builds.run_logged([sys.executable, "-m", "mypyc", *MODULES], out, digest, "mypyc", cwd=target)
    shutil.rmtree(target / "build", ignore_errors=True)
    return target


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".artifacts/mypyc", help="build directory")
    args = parser.parse_args(argv)
    print(build(Path(args.out).resolve()))


if __name__ == "__main__":
    main()
