"""Calls that wait for capacity, in priority order, instead of a 429.

Per (queue, flavor) one heap of waiters: higher priority first, then first come.
Only the head asks the ledger again: when told that something was given back in
this process, or when the refusal's ``retry_after`` has passed (capacity freed by
another replica or by a rate window), checked at least every ``poll`` seconds.
A call arriving while others wait joins the line rather than overtaking it. A call
refused by its API key's own limit leaves the line at once with that refusal: it would
otherwise hold the head of its queue's line for what is no one else's shortage.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gateway.ledgers import Grant, Refusal
from quota.ledger import KEY_LEVEL

__all__ = ["WaitLine"]

Attempt = Callable[[], Awaitable[Grant | Refusal]]


@dataclass(order=True)
class _Waiter:
    rank: tuple[int, int]
    wake: asyncio.Event = field(compare=False, default_factory=asyncio.Event)


class WaitLine:
    """The waiting calls of one process, per (queue, flavor)."""

    def __init__(self, *, poll: float = 0.25) -> None:
        self._poll = poll
        self._lines: dict[tuple[str, str], list[_Waiter]] = {}
        self._order = itertools.count()

    def waiting(self, queue: str, flavor: str) -> int:
        return len(self._lines.get((queue, flavor), ()))

    def notify(self, queue: str, flavor: str) -> None:
        """Capacity came back in this process: the head of the line tries again now."""
        line = self._lines.get((queue, flavor))
        if line:
            line[0].wake.set()

    async def wait(
        self, queue: str, flavor: str, priority: int, max_wait: float, attempt: Attempt
    ) -> Grant | Refusal:
        """Try ``attempt`` whenever this call heads the line, until it is granted or
        ``max_wait`` seconds passed; returns the grant or the last refusal."""
        deadline = time.monotonic() + max_wait
        line = self._lines.setdefault((queue, flavor), [])
        me = _Waiter((-priority, next(self._order)))
        heapq.heappush(line, me)
        result: Grant | Refusal | None = None
        try:
            while True:
                if line[0] is me:
                    result = await attempt()
                    if isinstance(result, Grant) or result.level == KEY_LEVEL:
                        return result
                    pause = min(max(result.retry_after, 0.001), self._poll)
                else:
                    pause = self._poll  # not my turn: wait to be woken as the new head
                left = deadline - time.monotonic()
                if left <= 0:
                    return result if result is not None else await attempt()
                me.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(me.wake.wait(), timeout=min(pause, left))
        finally:
            self._leave((queue, flavor), line, me)

    def _leave(self, key: tuple[str, str], line: list[_Waiter], me: _Waiter) -> None:
        line.remove(me)
        heapq.heapify(line)
        if line:
            line[0].wake.set()
        else:
            self._lines.pop(key, None)
