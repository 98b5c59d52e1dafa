"""The value the hot path builds for each inference call. It is defined next to the
table in ``tenants`` (which never imports the gateway) and re-exported here."""

from tenants.services.usage import UsageDay, UsageRecord

__all__ = ["UsageDay", "UsageRecord"]
