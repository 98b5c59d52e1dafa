"""Checks on model registry entries, shared by the config file and the gateway's registry.

Each returns what is wrong (for the caller's own error type), or ``None``."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

__all__ = ["MODEL_NAME_PATTERN", "base_url_error", "env_name_error", "model_name_error"]

MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$"
_MODEL_NAME = re.compile(MODEL_NAME_PATTERN)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def model_name_error(name: Any) -> str | None:
    if isinstance(name, str) and _MODEL_NAME.match(name):
        return None
    return f"invalid model name {name!r} (letters, digits and ._:/@+-, at most 128 characters)"


def env_name_error(name: Any) -> str | None:
    if isinstance(name, str) and _ENV_NAME.match(name):
        return None
    return f"invalid api_key_env {name!r}"


def base_url_error(url: Any) -> str | None:
    if not isinstance(url, str):
        return "base_url must be a string"
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        return "invalid base_url"
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        return "base_url must be an http(s) URL with a host"
    if parts.username or parts.password or parts.query or parts.fragment:
        return "base_url must not carry credentials, a query or a fragment"
    return None
