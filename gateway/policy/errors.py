"""Exceptions of the policy package.

    PolicyError                    base of everything raised here
    ├── PolicyLoadError            policies or data could not be loaded (raised by load)
    └── EvaluationError            one evaluation failed (engines turn it into a deny)
        └── UndefinedDocumentError     the evaluated document is undefined

`PolicyEngine.decide` raises none of these: it fails closed, returning a deny.
"""

from __future__ import annotations

__all__ = ["EvaluationError", "PolicyError", "PolicyLoadError", "UndefinedDocumentError"]


class PolicyError(Exception):
    """Base class of the policy package's errors."""


class PolicyLoadError(PolicyError):
    """Policies or data were rejected or could not be delivered to the engine.

    Raised by `PolicyEngine.load` and `run_tests`; the engine keeps whatever it
    had loaded before.
    """


class EvaluationError(PolicyError):
    """Evaluating one document failed.

    `code` is short and safe to show (``eval_error``, ``HTTP 500``); `detail`
    is the engine's full message, for logs.
    """

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail


class UndefinedDocumentError(EvaluationError):
    """The document has no value (no rule defined it, and it has no default)."""

    def __init__(self, ref: str) -> None:
        super().__init__("undefined", f"data.{ref} is undefined")
        self.ref = ref
