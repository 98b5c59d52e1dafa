"""Ignara's HTTP service: app factory, CLI and routes."""
