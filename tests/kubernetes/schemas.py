"""The official schemas the Kubernetes adapter's manifests are checked against.

- batch/v1 Job and JobTemplateSpec: the strict JSON schemas of Kubernetes 1.37 that the
  ``kubernetes-validate`` package ships (generated from the API server's OpenAPI; strict:
  an unknown field is an error, as with ``kubectl --validate=strict``);
- the JobSet: the ``openAPIV3Schema`` of the v1alpha2 JobSet CRD of kubernetes-sigs/jobset
  (config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml). It is not vendored in this
  repository: it is read from ``IGNARA_JOBSET_SCHEMA`` or from
  ``shared/data/kubernetes/jobset-v1alpha2-openapi.json`` beside the repository
  (``{"source": ..., "openAPIV3Schema": {...}}``); the JobSet checks skip without it.
  Unknown fields are made errors there too (the API server would drop them silently).
"""

from __future__ import annotations

import copy
import json
import os
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
from referencing import Registry, Resource

KUBERNETES_VERSION = "1.37"
JOBSET_SCHEMA_FILE = Path("data/kubernetes/jobset-v1alpha2-openapi.json")


def validate_job(manifest: dict[str, Any]) -> None:
    """Raises ``kubernetes_validate.ValidationError`` when the Job breaks the schema."""
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


@cache
def _strict_schemas() -> tuple[Registry[Any], Any]:
    folder = resources.files("kubernetes_validate") / "kubernetes-json-schema"
    folder = folder / f"v{KUBERNETES_VERSION}.0-local-strict"
    template = json.loads((folder / "jobtemplatespec-batch-v1.json").read_text())
    definitions = json.loads((folder / "_definitions.json").read_text())
    registry: Registry[Any] = Resource.from_contents(template) @ Registry()
    registry = Resource.from_contents(definitions) @ registry
    return registry, template


def validate_job_template(template: dict[str, Any]) -> None:
    """A JobSet's replicated job template against batch/v1 JobTemplateSpec (strict)."""
    registry, schema = _strict_schemas()
    jsonschema.Draft202012Validator(schema, registry=registry).validate(template)


def jobset_schema_path() -> Path | None:
    named = os.environ.get("IGNARA_JOBSET_SCHEMA")
    if named:
        return Path(named)
    beside = Path(__file__).resolve().parents[2].parent / "shared" / JOBSET_SCHEMA_FILE
    return beside if beside.is_file() else None


def _closed(schema: Any) -> Any:
    """The schema with unknown fields refused wherever it lists the known ones."""
    if isinstance(schema, dict):
        schema = {k: _closed(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


@cache
def _jobset_schema(path: Path) -> Any:
    document = json.loads(path.read_text())
    return _closed(copy.deepcopy(document["openAPIV3Schema"]))


def validate_jobset(manifest: dict[str, Any], path: Path) -> None:
    """Raises ``jsonschema.ValidationError`` when the JobSet breaks the CRD's schema."""
    jsonschema.Draft7Validator(_jobset_schema(path)).validate(manifest)
