"""One settings object; nothing else in Ignara reads the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    log_level: str = "info"


@dataclass(frozen=True)
class DatabaseSettings:
    # SQLite file in the working directory unless DATABASE_URL names a server.
    url: str = "sqlite:///ignara.db"


@dataclass(frozen=True)
class Settings:
    server: ServerSettings
    database: DatabaseSettings

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        return cls(
            server=ServerSettings(
                host=env.get("IGNARA_HOST", ServerSettings.host),
                port=int(env.get("IGNARA_PORT", ServerSettings.port)),
                log_level=env.get("IGNARA_LOG_LEVEL", ServerSettings.log_level),
            ),
            database=DatabaseSettings(url=env.get("DATABASE_URL", DatabaseSettings.url)),
        )
