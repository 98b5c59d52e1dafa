"""What a call reserves for its input: the static estimate, corrected by what the
upstream has reported for earlier calls.

The estimator of :mod:`gateway.inference.calls` counts about four characters a
token; a model's tokenizer may count far more (text in many scripts, code, long
numbers), and a chat template adds tokens it never sees. A call whose input was
under-counted is charged its real usage when it settles, past what it reserved:
with many calls in flight, a queue's window ends that much over its quota. So each
gateway keeps, per (model, queue), a correction factor learned from the usage the
upstream reports, and multiplies the next calls' input estimates by it:

- it only ever scales up (a factor below 1 is taken as 1): the static estimate is
  the floor, so a tenant's short or repetitive prompts never make others' calls
  reserve less than before;
- it rises fast and falls slowly (an asymmetric moving average of reported /
  estimated), so it follows the worse calls rather than the mean;
- each ratio is taken against at least :data:`MIN_BASIS` tokens, so a chat
  template's fixed tokens on a two-word prompt do not scale a long prompt's;
- it is clamped to ``max_factor``, and the reservation it gives never exceeds what
  the queue could ever be given (the call was admissible on its static estimate);
- the table is bounded (least recently updated dropped first): its keys are models
  of the registry and queues of the config, which a caller cannot make up (an
  unknown model is a 404 before any reservation), and the bound holds regardless.

The table lives in memory, per gateway, and starts empty: the first calls after a
start reserve the static estimate, as before.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable

from gateway.inference.calls import Call

__all__ = ["MIN_BASIS", "InputCorrections", "reserved_tokens"]

MIN_BASIS = 64  # tokens: ratios of smaller estimates are taken against this
RISE = 0.5  # weight of a ratio above the average: a few calls suffice
FALL = 0.05  # weight of one below: a run of over-estimates lowers it slowly
MAX_ENTRIES = 4096


class InputCorrections:
    """Per (model, queue): the factor the input estimate is multiplied by.

    Usage::

        corrections = InputCorrections(max_factor=8.0)
        factor = corrections.factor("llama", "team-a")         # 1.0 until it learns
        corrections.learn("llama", "team-a", estimated=100, reported=300)
    """

    __slots__ = ("_averages", "max_entries", "max_factor")

    def __init__(self, *, max_factor: float = 8.0, max_entries: int = MAX_ENTRIES) -> None:
        self.max_factor = max(1.0, max_factor)
        self.max_entries = max(1, max_entries)
        self._averages: OrderedDict[tuple[str, str], float] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.max_factor > 1.0

    def __len__(self) -> int:
        return len(self._averages)

    def factor(self, model: str, queue: str) -> float:
        average = self._averages.get((model, queue))
        return 1.0 if average is None else min(self.max_factor, max(1.0, average))

    def learn(self, model: str, queue: str, *, estimated: int, reported: int) -> None:
        """One settled call: its static input estimate and the input the upstream counted."""
        if not self.enabled or estimated <= 0 or reported < 0:
            return
        ratio = min(self.max_factor, reported / max(estimated, MIN_BASIS))
        key = (model, queue)
        averages = self._averages
        average = averages.get(key)
        if average is None:
            average = ratio
            if len(averages) >= self.max_entries:
                averages.popitem(last=False)
        else:
            average += (RISE if ratio > average else FALL) * (ratio - average)
            averages.move_to_end(key)
        averages[key] = average

    def reserved_prompt(self, call: Call, queue: str) -> int:
        """The input tokens to reserve for ``call`` on ``queue``."""
        factor = self.factor(call.model, queue) if self.enabled else 1.0
        return call.prompt_tokens if factor == 1.0 else math.ceil(call.prompt_tokens * factor)


def reserved_tokens(call: Call, prompt: int, limits: Iterable[int]) -> int:
    """What the call reserves: ``prompt`` (corrected) plus its output, but never more
    than the smallest of the queue's token ``limits`` unless the static estimate
    itself is (then it is refused as before, by the size checks)."""
    wanted = prompt + call.completion_tokens
    ceiling = min(limits, default=wanted)
    return max(call.estimate, min(wanted, ceiling))
