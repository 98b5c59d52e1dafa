"""OPA's Go engine in-process, through opa-golib-python-bindings.

The bindings wrap OPA's `rego` package in a shared library called via ctypes.
Calls block; `EmbeddedOpa` runs them on its worker thread. The wheel is
imported, and the Go runtime started, only when an evaluator is created.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType

from gateway.policy.errors import EvaluationError, PolicyLoadError, UndefinedDocumentError

__all__ = ["GolibEvaluator"]

# A query that reads no policy: evaluating it compiles every added module, so a
# module that parses but does not compile (undefined function, type error) is
# caught at load time instead of at the first decision.
_PROBE_QUERY = "probe := true"


def _bindings() -> ModuleType:
    return importlib.import_module("opa_bindings")


class GolibEvaluator:
    """One embedded OPA engine. Not for concurrent use: call from one thread."""

    def __init__(self) -> None:
        bindings = _bindings()
        self._undefined: type[Exception] = bindings.OpaUndefinedError
        self._error: type[Exception] = bindings.OpaError
        self._engine = bindings.OpaEngine()

    def add_policy(self, module_id: str, source: str) -> None:
        try:
            self._engine.add_policy(module_id, source)
        except self._error as exc:
            raise PolicyLoadError(f"policy {module_id} rejected: {_message(exc)}") from exc

    def add_data(self, data: Mapping[str, object]) -> None:
        try:
            self._engine.add_data(dict(data))
        except (self._error, TypeError, ValueError) as exc:
            raise PolicyLoadError(f"policy data rejected: {_message(exc)}") from exc

    def check(self) -> None:
        """Compile everything added so far; raise `PolicyLoadError` if it does not."""
        try:
            self._engine.eval_query(_PROBE_QUERY)
        except self._error as exc:
            raise PolicyLoadError(f"policies do not compile: {_message(exc)}") from exc

    def evaluate(self, ref: str, input: Mapping[str, object] | None) -> object:
        """The value of ``data.<ref>``.

        Raises:
            UndefinedDocumentError: it has no value.
            EvaluationError: evaluation failed (code ``eval_error`` and the like).
        """
        try:
            value: object = self._engine.eval_document(ref, input)
        except self._undefined as exc:
            raise UndefinedDocumentError(ref) from exc
        except self._error as exc:
            raise EvaluationError(_code(exc), _message(exc)) from exc
        except (TypeError, ValueError, RecursionError) as exc:
            raise EvaluationError("invalid_input", str(exc)) from exc
        return value

    def close(self) -> None:
        self._engine.close()


def _code(exc: Exception) -> str:
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) else type(exc).__name__


def _message(exc: Exception) -> str:
    message = getattr(exc, "message", None)
    return message if isinstance(message, str) else str(exc)
