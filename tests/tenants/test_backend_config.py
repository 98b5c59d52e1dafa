"""Backends declared in the config by name and kind, and the flavor naming where its
admitted work goes: validated (errors name the field), stored, exported, applied
idempotently."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from quota.errors import ConfigError
from tenants import Database, parse_config
from tenants.config_file import LocalBackendDoc, RayBackendDoc, SlurmBackendDoc
from tenants.services import apply_config, export_config
from tenants.services.config import load_backend_config

HPC = {
    "name": "hpc",
    "kind": "slurm",
    "url": "http://127.0.0.1:6820",
    "token_env": "IGNARA_SLURM_TOKEN",
    "user": "root",
    "partition": "debug",
    "account": "",
    "api_version": "v0.0.38",
}
RAY = {"name": "ray-east", "kind": "ray", "url": "http://127.0.0.1:8265"}
QUEUE = {
    "name": "q",
    "resource_groups": [
        {
            "resources": ["nvidia.com/gpu"],
            "flavors": [{"name": "h100", "quotas": {"nvidia.com/gpu": {"nominal": 8}}}],
        }
    ],
}


def config(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "backends": [copy.deepcopy(HPC), {"name": "local", "kind": "local"}],
        "flavors": [{"name": "h100", "backend": "hpc"}, "a100"],
        "cluster_queues": [copy.deepcopy(QUEUE)],
    }
    data.update(overrides)
    return data


def with_hpc(**fields: Any) -> dict[str, Any]:
    return config(backends=[{**HPC, **fields}])


def test_a_declared_slurm_backend_and_a_flavor_naming_it_parse() -> None:
    parsed = parse_config(config())
    assert parsed.backends == [
        SlurmBackendDoc(
            name="hpc",
            url="http://127.0.0.1:6820",
            token_env="IGNARA_SLURM_TOKEN",
            partition="debug",
        ),
        LocalBackendDoc(),
    ]
    assert parsed.flavor_names == ["h100", "a100"]
    assert parsed.flavor_backends == {"h100": "hpc"}


def with_ray(**fields: Any) -> dict[str, Any]:
    return config(backends=[{**RAY, **fields}], flavors=["h100"])


def test_a_declared_ray_backend_parses_with_an_optional_token_variable() -> None:
    parsed = parse_config(
        config(
            backends=[RAY, {**RAY, "name": "ray-west", "token_env": "IGNARA_RAY_TOKEN"}],
            flavors=[{"name": "h100", "backend": "ray-east"}],
        )
    )
    assert parsed.backends == [
        RayBackendDoc(name="ray-east", url="http://127.0.0.1:8265"),
        RayBackendDoc(name="ray-west", url="http://127.0.0.1:8265", token_env="IGNARA_RAY_TOKEN"),
    ]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (with_ray(url="ftp://x"), "backends[0].url"),
        (with_ray(url="http://u:p@host:8265"), "backends[0].url"),
        (with_ray(token_env="1BAD"), "backends[0].token_env"),
        (with_ray(timeout_seconds=0), "backends[0].timeout_seconds"),
        (with_ray(token="secret-in-the-file"), "backends[0]"),
        (with_ray(partition="debug"), "backends[0]"),
        (with_ray(name="Ray"), "backends[0].name"),
        (config(backends=[RAY, HPC | {"name": "ray-east"}]), "backends[1].name"),
    ],
)
def test_a_bad_ray_backend_is_refused_naming_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    assert str(caught.value).startswith(f"{field}"), str(caught.value)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (with_hpc(kind="pbs"), "backends[0]"),
        (with_hpc(url="ftp://x"), "backends[0].url"),
        (with_hpc(url="http://u:p@host:6820"), "backends[0].url"),
        (with_hpc(token_env="1BAD"), "backends[0].token_env"),
        (with_hpc(api_version="v0.0.99"), "backends[0].api_version"),
        (with_hpc(partition="debug; rm -rf /"), "backends[0].partition"),
        (with_hpc(user=""), "backends[0].user"),
        (with_hpc(output_dir="relative/dir"), "backends[0].output_dir"),
        (with_hpc(output_dir="/tmp/../etc"), "backends[0].output_dir"),
        (with_hpc(token="secret-in-the-file"), "backends[0]"),
        (with_hpc(name="HPC"), "backends[0].name"),
        (with_hpc(name="local"), "backends[0].name"),
        (config(backends=[HPC, HPC]), "backends[1].name"),
        (config(backends=[{"name": "mine", "kind": "local"}]), "backends[0].name"),
        (config(flavors=[{"name": "h100", "backend": "nowhere"}]), "flavors[0].backend"),
        (config(flavors=[{"name": "h100"}]), "flavors[0]"),
    ],
)
def test_a_bad_backend_is_refused_naming_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    assert str(caught.value).startswith(f"{field}"), str(caught.value)


def test_no_backends_declared_is_the_local_one_as_before() -> None:
    parsed = parse_config({"flavors": ["h100"], "cluster_queues": [QUEUE]})
    assert parsed.backends == [] and parsed.flavor_backends == {}


async def test_backends_are_stored_exported_and_applied_idempotently(database: Database) -> None:
    parsed = parse_config(config())
    async with database.session() as session:
        report = await apply_config(session, parsed, actor="test")
    assert "setting backends" not in report.updated  # created with the settings row
    async with database.session() as session:
        stored = await load_backend_config(session)
        exported = await export_config(session)
    assert list(stored.backends) == parsed.backends
    assert stored.flavor_backends == {"h100": "hpc"}
    assert exported["flavors"] == [{"name": "h100", "backend": "hpc"}, "a100"]
    assert exported["backends"][0]["token_env"] == "IGNARA_SLURM_TOKEN"
    # What is exported applies back as no change.
    async with database.session() as session:
        again = await apply_config(session, parse_config(exported), actor="test")
    assert not again.changed, again.summary()
    # A changed backend is a change, audited as that backend's.
    async with database.session() as session:
        changed = await apply_config(session, parse_config(with_hpc(partition="gpu")), actor="t")
    assert changed.updated == ["backend hpc"], changed.summary()
