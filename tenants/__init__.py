"""Tenants, principals, API keys and queues: the schema and the services that change it."""
