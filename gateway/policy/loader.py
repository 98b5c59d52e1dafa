"""Reading Rego modules from a directory (`policies/rego/` in the repository)."""

from __future__ import annotations

from pathlib import Path

from gateway.policy.errors import PolicyLoadError

__all__ = ["load_policies", "load_tests"]

_TEST_SUFFIX = "_test.rego"


def load_policies(directory: Path) -> dict[str, str]:
    """Production modules: every ``*.rego`` under `directory` except ``*_test.rego``.

    Keys are module ids (the path relative to `directory`, with ``/``), in sorted
    order, which is also the order an OPA server receives them.

    Raises:
        PolicyLoadError: the directory is missing, unreadable or holds no policies.
    """
    modules = _read(directory, tests=False)
    if not modules:
        raise PolicyLoadError(f"no Rego policies (*.rego) in {directory}")
    return modules


def load_tests(directory: Path) -> dict[str, str]:
    """Test modules only (``*_test.rego``), for `PolicyEngine.run_tests`."""
    return _read(directory, tests=True)


def _read(directory: Path, *, tests: bool) -> dict[str, str]:
    if not directory.is_dir():
        raise PolicyLoadError(f"policy directory {directory} does not exist")
    modules: dict[str, str] = {}
    for path in sorted(directory.rglob("*.rego")):
        if path.name.endswith(_TEST_SUFFIX) is not tests:
            continue
        try:
            modules[path.relative_to(directory).as_posix()] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyLoadError(f"cannot read policy {path}: {exc}") from exc
    return modules
