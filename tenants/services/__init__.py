"""Services that change tenant and quota state; each owns its rules, none speaks HTTP."""

from tenants.services.config import (
    HOLDING_STATES,
    ApplyReport,
    apply_config,
    export_config,
    is_unconfigured,
    load_quota_config,
)

__all__ = [
    "HOLDING_STATES",
    "ApplyReport",
    "apply_config",
    "export_config",
    "is_unconfigured",
    "load_quota_config",
]
