"""The ``ray`` section of POST /api/v1/workloads: checked before anything is stored (a 422
naming the field), stored as given, and passed to Ray's Jobs API by the adapter, the
gateway's own names and the gang's resources kept its own. No Ray needed: the backend is
declared at an address nothing answers, and nothing is sent there before admission."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gateway.backends import JobSpec, PodShape
from gateway.backends.ray.mapping import job_request
from gateway.settings import Settings
from tests.slurm.test_slurm_gateway import Api
from tests.support.gangs import gang
from tests.support.sections import gateway_for

SECTION = {
    "pip": ["torch==2.5.1", "datasets[audio]>=3; python_version >= '3.10'"],
    "working_dir": "s3://bucket/code/run-7.zip",
    "py_modules": ["gs://bucket/libs/helpers.zip"],
    "entrypoint_resources": {"accelerator_type:H100": 1},
    "metadata": {"sweep": "7"},
}


@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    ray = {"name": "ray-east", "kind": "ray", "url": "http://127.0.0.1:9", "timeout_seconds": 1}
    with gateway_for(settings, ray) as api:
        yield api


def with_section(section: Any) -> dict[str, Any]:
    return {**gang("sectioned", "true"), "ray": section}


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"runtime_env": {}}, "ray.runtime_env"),  # not an option passed on
        ({"pip": "torch"}, "ray.pip"),
        ({"pip": ["--index-url=http://evil.example/simple"]}, "ray.pip[0]"),
        ({"working_dir": "/etc"}, "ray.working_dir"),  # a path on Ray's machine
        ({"working_dir": "file:///etc"}, "ray.working_dir"),
        ({"py_modules": ["https://x.example/m.zip", "ftp://x"]}, "ray.py_modules[1]"),
        ({"entrypoint_resources": {"GPU": 4}}, "ray.entrypoint_resources.GPU"),  # past quota
        ({"entrypoint_resources": {"CPU": 1}}, "ray.entrypoint_resources.CPU"),
        ({"entrypoint_resources": {"tpu": 0}}, "ray.entrypoint_resources[...]"),  # not > 0
        ({"entrypoint_resources": {"a b": 1}}, "ray.entrypoint_resources"),  # a bad key
        ({"metadata": {"ignara.tenant": "beta"}}, "ray.metadata.ignara.tenant"),
        ({"metadata": {"k": 7}}, "ray.metadata[...]"),
    ],
)
def test_a_bad_ray_section_is_a_422_naming_the_field_and_stores_nothing(
    api: Api, section: Any, field: str
) -> None:
    response = api.client.post("/api/v1/workloads", json=with_section(section), headers=api.headers)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["message"].startswith(f"{field}: "), error
    assert api.client.get("/api/v1/workloads", headers=api.headers).json()["items"] == []


def test_a_good_ray_section_is_stored_and_reaches_rays_submission(api: Api) -> None:
    workload = api.submit(with_section(SECTION))
    assert api.get(workload)["state"] in ("pending", "admitted", "running")
    # What the dispatcher hands the adapter: the stored options, as a JobSpec carries them.
    spec = JobSpec(
        f"{workload}-1",
        ("true",),
        {"SEED": "1"},
        600,
        pods=(PodShape(2, gpus=1),),
        tenant="alpha",
        options={"ray": SECTION},
    )
    body = job_request(spec).body()
    assert body["runtime_env"] == {
        "pip": SECTION["pip"],
        "working_dir": "s3://bucket/code/run-7.zip",
        "py_modules": ["gs://bucket/libs/helpers.zip"],
        "env_vars": {"SEED": "1", "IGNARA_JOB": f"{workload}-1"},
    }
    assert body["entrypoint_resources"] == {"accelerator_type:H100": 1}
    assert body["entrypoint_num_gpus"] == 2  # from the gang, not the section
    assert body["metadata"] == {
        "sweep": "7",
        "ignara.job": f"{workload}-1",
        "ignara.workload": workload,
        "ignara.tenant": "alpha",
    }


def test_a_ray_section_for_a_workload_that_cannot_go_to_ray_is_a_422(api: Api) -> None:
    body = {**with_section({"metadata": {"a": "b"}}), "backend": "local"}
    response = api.client.post("/api/v1/workloads", json=body, headers=api.headers)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"].startswith("ray: ")
