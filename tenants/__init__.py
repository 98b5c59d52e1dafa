"""Tenants, principals, API keys, quota objects and workloads: the schema and the
services that change them."""

from tenants.config_file import IgnaraConfig, load_config_file, parse_config
from tenants.db import Database, async_url, migrate
from tenants.errors import ConflictError, InvalidRequestError, NotFoundError, TenantsError

__all__ = [
    "ConflictError",
    "Database",
    "IgnaraConfig",
    "InvalidRequestError",
    "NotFoundError",
    "TenantsError",
    "async_url",
    "load_config_file",
    "migrate",
    "parse_config",
]
