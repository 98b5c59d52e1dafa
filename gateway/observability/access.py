"""What one inference call adds to its access log line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["AccessNote"]


@dataclass(slots=True)
class AccessNote:
    """Filled in by the inference service as the call goes (only when access logging
    is on): the model and queue once known, the tokens once the answer is out."""

    model: str | None = None
    queue: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt: Any = None  # what the caller sent, only with IGNARA_LOG_PROMPTS

    def fields(self) -> dict[str, Any]:
        found = {
            "model": self.model,
            "queue": self.queue,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "prompt": self.prompt,
        }
        return {name: value for name, value in found.items() if value is not None}
