"""Services that change tenant and quota state; each owns its rules, none speaks HTTP."""

from tenants.services.config import (
    HOLDING_STATES,
    ApplyReport,
    apply_config,
    count_cluster_queues,
    export_config,
    is_unconfigured,
    load_quota_config,
)
from tenants.services.tenants import TenantRemoval, delete_tenant, live_tenants, open_queues

__all__ = [
    "HOLDING_STATES",
    "ApplyReport",
    "TenantRemoval",
    "apply_config",
    "count_cluster_queues",
    "delete_tenant",
    "export_config",
    "is_unconfigured",
    "live_tenants",
    "load_quota_config",
    "open_queues",
]
