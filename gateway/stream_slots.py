"""How many event streams (``GET /api/v1/admin/events``) may be open at once in this gateway.

Each open stream reads the database twice per poll for as long as it lasts, so open
streams are a load a caller chooses. A tenant (all its keys and console sessions
together: a tenant admin can make keys) holds at most ``per_tenant`` of them, and all
tenants together at most ``total``; platform admins have ``per_tenant`` of their own,
outside the tenants' total, so tenants cannot crowd the platform's console out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Slot", "StreamSlots"]


@dataclass(eq=False)
class Slot:
    """One open stream's place; :meth:`release` gives it back, once however often called."""

    _owner: StreamSlots
    _holder: str
    _held: bool = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._owner._give_back(self._holder)


@dataclass
class StreamSlots:
    per_tenant: int
    total: int
    platform: str = "*"
    _open: dict[str, int] = field(default_factory=dict)
    _tenants_open: int = 0

    def __post_init__(self) -> None:
        if self.per_tenant < 1 or self.total < 1:
            raise ValueError("stream limits must be at least 1")

    def take(self, holder: str) -> Slot | None:
        """A place for one more stream of ``holder`` (a tenant, or :attr:`platform`), or
        None when it or the tenants together are at their limit."""
        held = self._open.get(holder, 0)
        if held >= self.per_tenant:
            return None
        tenant = holder != self.platform
        if tenant and self._tenants_open >= self.total:
            return None
        self._open[holder] = held + 1
        self._tenants_open += tenant
        return Slot(self, holder)

    def open(self, holder: str) -> int:
        """How many streams ``holder`` has open."""
        return self._open.get(holder, 0)

    def _give_back(self, holder: str) -> None:
        left = self._open[holder] - 1
        if left:
            self._open[holder] = left
        else:
            del self._open[holder]
        self._tenants_open -= holder != self.platform
