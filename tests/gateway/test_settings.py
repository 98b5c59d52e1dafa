"""One settings object, read from the environment once."""

from __future__ import annotations

import pytest

from gateway.auth import OidcVerifier
from gateway.services import oidc_verifier
from gateway.settings import Settings


def test_defaults_need_no_environment() -> None:
    settings = Settings.from_env({})
    assert settings.database.url == "sqlite:///ignara.db"
    assert settings.policy.opa_url is None and settings.auth.oidc_issuer is None
    assert oidc_verifier(settings) is None


def test_environment_switches_each_part() -> None:
    settings = Settings.from_env(
        {
            "DATABASE_URL": "postgresql://ignara@db:5432/ignara",
            "OPA_URL": "http://opa:8181",
            "IGNARA_PORT": "9000",
            "OIDC_ISSUER": "https://idp.example",
            "OIDC_AUDIENCE": "ignara",
            "OIDC_JWKS_URI": "https://idp.example/jwks",
        }
    )
    assert settings.database.url.startswith("postgresql://")
    assert settings.policy.opa_url == "http://opa:8181" and settings.server.port == 9000
    assert isinstance(oidc_verifier(settings), OidcVerifier)


def test_an_incomplete_oidc_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="OIDC_AUDIENCE and OIDC_JWKS_URI"):
        oidc_verifier(Settings.from_env({"OIDC_ISSUER": "https://idp.example"}))


def test_only_allowed_variables_can_become_upstream_keys() -> None:
    """An endpoint's api_key_env is sent upstream: the gateway's own secrets must never be
    among the variables it may name."""
    env = {
        "IGNARA_UPSTREAM_KEY_LLAMA": "llama-secret",
        "IGNARA_UPSTREAM_KEY_": "a prefix alone names nothing",
        "OPENAI_API_KEY": "openai-secret",
        "IGNARA_ADMIN_KEY": "bootstrap-admin-secret",
        "IGNARA_KEY_PEPPER": "pepper",
        "DATABASE_URL": "postgresql://u:password@db/ignara",
    }
    default = Settings.from_env(env).inference
    assert dict(default.key_env) == {"IGNARA_UPSTREAM_KEY_LLAMA": "llama-secret"}
    assert not default.key_rule.allows("IGNARA_ADMIN_KEY")
    listed = Settings.from_env({**env, "IGNARA_ALLOWED_UPSTREAM_KEYS": " OPENAI_API_KEY, "})
    assert set(listed.inference.key_env) == {"IGNARA_UPSTREAM_KEY_LLAMA", "OPENAI_API_KEY"}
    only_listed = Settings.from_env(
        {
            **env,
            "IGNARA_ALLOWED_UPSTREAM_KEY_PREFIX": "",
            "IGNARA_ALLOWED_UPSTREAM_KEYS": "OPENAI_API_KEY",
        }
    ).inference
    assert set(only_listed.key_env) == {"OPENAI_API_KEY"}
    assert "be one of OPENAI_API_KEY" in only_listed.key_rule.describe()


def test_only_allowed_variables_can_become_backend_secrets() -> None:
    env = {
        "IGNARA_SLURM_TOKEN": "jwt-1",
        "IGNARA_SLURM_": "bare prefix",
        "SITE_TOKEN": "jwt-2",
        "DATABASE_URL": "postgresql://u:secret@db/ignara",
    }
    default = Settings.from_env(env).backends
    assert dict(default.secret_env) == {"IGNARA_SLURM_TOKEN": "jwt-1"}
    assert "jwt-1" not in repr(default)
    widened = Settings.from_env(
        {
            **env,
            "IGNARA_ALLOWED_BACKEND_SECRETS": "SITE_TOKEN",
            "IGNARA_ALLOWED_BACKEND_SECRET_PREFIX": "",
        }
    ).backends
    assert dict(widened.secret_env) == {"SITE_TOKEN": "jwt-2"}
    assert not widened.secret_rule.allows("DATABASE_URL")


def test_key_hygiene_settings_are_read_and_checked() -> None:
    auth = Settings.from_env(
        {
            "IGNARA_KEY_IDLE_DAYS": "14",
            "IGNARA_KEY_EXPIRY_INTERVAL": "60",
            "IGNARA_KEY_ANOMALY_FACTOR": "5",
            "IGNARA_KEY_ANOMALY_FLOOR": "1000",
        }
    ).auth
    assert (auth.key_idle_days, auth.key_expiry_interval) == (14, 60.0)
    assert (auth.key_anomaly_factor, auth.key_anomaly_floor) == (5.0, 1000)
    defaults = Settings.from_env({}).auth
    assert (defaults.key_idle_days, defaults.key_anomaly_factor) == (30, 10.0)
    for name, bad in (
        ("IGNARA_KEY_IDLE_DAYS", "0"),
        ("IGNARA_KEY_IDLE_DAYS", "ten"),
        ("IGNARA_KEY_EXPIRY_INTERVAL", "0"),
        ("IGNARA_KEY_ANOMALY_FACTOR", "1"),
        ("IGNARA_KEY_ANOMALY_FACTOR", "nan"),
        ("IGNARA_KEY_ANOMALY_FLOOR", "-5"),
    ):
        with pytest.raises(ValueError, match=name):
            Settings.from_env({name: bad})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, 0.5), ("2", 2.0), ("0.05", 0.05)],
)
def test_the_admission_pass_interval_is_read(raw: str | None, expected: float) -> None:
    env = {} if raw is None else {"IGNARA_ADMISSION_INTERVAL": raw}
    assert Settings.from_env(env).admission.interval == expected


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "inf"])
def test_an_admission_pass_interval_that_is_not_a_positive_duration_is_refused(
    raw: str,
) -> None:
    with pytest.raises(ValueError, match="IGNARA_ADMISSION_INTERVAL"):
        Settings.from_env({"IGNARA_ADMISSION_INTERVAL": raw})
