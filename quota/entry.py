"""A head workload's passage through one admission cycle."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from quota.cache import ClusterQueueNode
from quota.flavor_assigner import Assignment
from quota.model import Workload
from quota.preemption import Target
from quota.reasons import PendingReason, ReasonCode

__all__ = ["Entry", "Status"]


class Status(Enum):
    NOMINATED = "nominated"
    SKIPPED = "skipped"
    ADMITTED = "admitted"
    PREEMPTING = "preempting"
    INADMISSIBLE = "inadmissible"


@dataclass
class Entry:
    """A head in one cycle: its assignment, victims, outcome and why."""

    workload: Workload
    queue: ClusterQueueNode
    assignment: Assignment
    targets: list[Target] = field(default_factory=list)
    status: Status = Status.NOMINATED
    reason: PendingReason | None = None
    immediate: bool = False  # requeue at the front even in a BestEffortFIFO queue

    def mark(
        self,
        status: Status,
        code: ReasonCode,
        message: str | None,
        *,
        immediate: bool,
        prefix: str = "",
    ) -> None:
        """``message`` None: ``prefix`` and the blockers' messages (see
        :class:`PendingReason`)."""
        self.status = status
        blockers = tuple(self.assignment.blockers)
        self.reason = PendingReason(code, message, blockers, prefix=prefix)
        self.immediate = immediate

    @property
    def sticky(self) -> bool:
        """Waiting for its own preemptions: keeps its place at the head."""
        return self.status is Status.PREEMPTING
