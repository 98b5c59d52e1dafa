"""The schema: one table per module."""

from tenants.models.api_key import ApiKey
from tenants.models.audit import AuditEntry
from tenants.models.charge import ChargeRow
from tenants.models.console_session import ConsoleSessionRow, SignInAttemptRow
from tenants.models.inference import ModelRow
from tenants.models.principal import Principal
from tenants.models.quota import ClusterQueueRow, CohortRow, FlavorRow
from tenants.models.tenant import Tenant
from tenants.models.usage import UsageRecordRow
from tenants.models.workload import WorkloadEventRow, WorkloadRow

__all__ = [
    "ApiKey",
    "AuditEntry",
    "ChargeRow",
    "ClusterQueueRow",
    "CohortRow",
    "ConsoleSessionRow",
    "FlavorRow",
    "ModelRow",
    "Principal",
    "SignInAttemptRow",
    "Tenant",
    "UsageRecordRow",
    "WorkloadEventRow",
    "WorkloadRow",
]
