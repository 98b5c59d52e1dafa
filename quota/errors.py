"""Errors raised by the quota engine.

QuotaError
 +-- ConfigError        a quota configuration is not valid (names the field)
 |    +-- ScenarioError a scenario file is not valid (names the field or step)
 +-- WorkloadError      a workload operation that cannot be done (unknown
                        queue, duplicate name, finish of a pending workload)
"""

from __future__ import annotations

__all__ = ["ConfigError", "QuotaError", "ScenarioError", "WorkloadError"]


class QuotaError(Exception):
    """Base of every error the quota engine raises on purpose."""


class ConfigError(QuotaError):
    """A quota configuration is not valid; the message names the offending field."""


class ScenarioError(ConfigError):
    """A scenario file is not valid; the message names the offending field or step."""


class WorkloadError(QuotaError):
    """A workload operation the engine refuses (unknown queue, duplicate, bad state)."""
