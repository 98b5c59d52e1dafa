"""A head workload's passage through one admission cycle."""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(slots=True)
class Entry:
    """A head in one cycle: its assignment, victims, outcome and why."""

    workload: Workload
    queue: ClusterQueueNode
    assignment: Assignment
    targets: list[Target]
    status: Status
    reason: PendingReason | None
    immediate: bool  # requeue at the front even in a BestEffortFIFO queue

    def __init__(  # written out: see quota/__init__.py, "Hot classes"
        self,
        workload: Workload,
        queue: ClusterQueueNode,
        assignment: Assignment,
        targets: list[Target],
    ) -> None:
        self.workload = workload
        self.queue = queue
        self.assignment = assignment
        self.targets = targets
        self.status = Status.NOMINATED
        self.reason = None
        self.immediate = False

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
