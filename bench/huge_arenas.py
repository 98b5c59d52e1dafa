"""Back pymalloc's arenas with transparent huge pages: a measuring aid.

``bench/admission.py --huge-page-arenas`` (and ``bench/growth.py --huge-page-arenas``)
install it before anything is built, so every arena of the run comes from 2 MiB-aligned
regions the kernel is asked to back with huge pages (``bench/huge_arenas.c``). Compared
with a run without, it says how much of a large heap's cost is address translation: with
4 KiB pages the translation buffer covers a few MiB, and a heap of hundreds of MiB misses
it on most first touches. CPython 3.13 builds this in (``--with-pymalloc-hugepages``); the
gateway does not use it.

The extension is built on first use into ``.artifacts/huge-arenas`` (a C compiler and
Python's headers are needed, as for ``bench.compile_engine``) and rebuilt when the source
changes.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
from pathlib import Path

from bench import builds

__all__ = ["DEFAULT_OUT", "build", "install", "stats"]

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path(__file__).with_suffix(".c")
DEFAULT_OUT = ROOT / ".artifacts" / "huge-arenas"
MODULE = "_huge_arenas"

# Run in a process of its own, so the compiler's output goes to the log, not the run's.
_SETUP = """
import sys
from setuptools import Distribution, Extension
name, source, out, scratch = sys.argv[1:]
dist = Distribution({"ext_modules": [Extension(name, [source])]})
command = dist.get_command_obj("build_ext")
command.build_lib, command.build_temp = out, scratch
command.ensure_finalized()
command.run()
"""


def build(out: Path = DEFAULT_OUT) -> Path:
    """Build the extension into ``out`` unless it holds a build of the current source;
    returns the directory to import it from."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()
    if builds.is_current(out, digest, lambda: any(out.glob(f"{MODULE}.*"))):
        return out
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-c", _SETUP, MODULE, str(SOURCE), str(out), str(out / "tmp")]
    builds.run_logged(command, out, digest, f"building {SOURCE.name}")
    return out


def install(out: Path = DEFAULT_OUT) -> None:
    """From now on, pymalloc's new arenas come from huge-page regions."""
    directory = str(build(out))
    if directory not in sys.path:
        sys.path.insert(0, directory)
    importlib.import_module(MODULE).install()


def stats() -> dict[str, int] | None:
    """Arenas handed out now and at most, regions reserved, and a region's size in bytes;
    ``None`` unless :func:`install` was called."""
    module = sys.modules.get(MODULE)
    if module is None:
        return None
    figures: dict[str, int] = module.stats()
    return figures
