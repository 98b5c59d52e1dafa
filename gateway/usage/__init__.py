"""Usage records: recorded off the hot path, written to SQL in batches, read back by
`GET /api/v1/usage`."""

from gateway.usage.controllers import UsageController
from gateway.usage.recorder import UsageRecorder
from gateway.usage.records import UsageDay, UsageRecord

__all__ = ["UsageController", "UsageDay", "UsageRecord", "UsageRecorder"]
