"""What a workload may ask of Kubernetes beyond the backend-neutral job (``kubernetes:
{...}`` in POST /api/v1/workloads): pieces of its pods' template, each checked by
Kubernetes' own rules for that field (qualified names, label values, toleration
combinations), so the API refuses what the API server would (tests/kubernetes prove every
accepted section makes manifests valid against the official schemas).

- ``node_selector``: node labels the pods also need; the flavor's own node labels are
  kept (a key both set is the flavor's), so a section narrows placement, never escapes it;
- ``tolerations``: added to the flavor's (core/v1 Toleration, in snake case);
- ``labels`` and ``annotations`` on the pods, never with the gateway's ``ignara.io/``
  prefix nor Kubernetes' reserved ``kubernetes.io`` / ``k8s.io`` ones (the gateway's own
  labels find a job's pods; the reserved ones are the controllers');
- ``working_dir``: the container's working directory.

No service account: a pod picking one could run with its powers (a job never runs with
the gateway's, or anyone's, powers on the cluster); the pods get no token at all.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

__all__ = ["KubernetesOptions", "TolerationOption"]

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
# A qualified name (label or annotation key): an optional DNS subdomain prefix, "/", a name.
_Key = Annotated[str, Meta(pattern=rf"^({_SUBDOMAIN}/)?{_NAME}$", max_length=317)]
_LabelValue = Annotated[str, Meta(pattern=rf"^({_NAME})?$", max_length=63)]
_RESERVED = ("ignara.io", "kubernetes.io", "k8s.io")


class TolerationOption(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A pod toleration (core/v1 Toleration), in snake case."""

    key: _Key | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: _LabelValue = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""
    toleration_seconds: Annotated[int, Meta(ge=0, le=10**9)] | None = None

    def problem(self) -> tuple[str, str] | None:
        """Kubernetes' rules between the fields: (the field, why) or ``None``."""
        if self.key is None and self.operator != "Exists":
            return "operator", "must be Exists when no key is given"
        if self.operator == "Exists" and self.value:
            return "value", "must be empty when operator is Exists"
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            return "toleration_seconds", "is only for effect NoExecute"
        return None

    def manifest(self) -> dict[str, object]:
        spelled = {
            "key": self.key,
            "operator": self.operator,
            "value": self.value,
            "effect": self.effect,
            "tolerationSeconds": self.toleration_seconds,
        }
        return {k: v for k, v in spelled.items() if v not in ("", None)}


class KubernetesOptions(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Pieces of the pods' template (see the module's docstring)."""

    node_selector: Annotated[dict[_Key, _LabelValue], Meta(max_length=32)] | None = None
    tolerations: Annotated[list[TolerationOption], Meta(max_length=16)] | None = None
    labels: Annotated[dict[_Key, _LabelValue], Meta(max_length=32)] | None = None
    annotations: (
        Annotated[dict[_Key, Annotated[str, Meta(max_length=4096)]], Meta(max_length=32)] | None
    ) = None
    working_dir: Annotated[str, Meta(pattern=r"^/[ -~]{0,1023}$")] | None = None

    def problem(self, _max_runtime_seconds: int) -> tuple[str, str] | None:
        """What Kubernetes would refuse, or what is the gateway's or Kubernetes' own: the
        option and why, or ``None``."""
        for field in ("node_selector", "labels", "annotations"):
            for key in sorted(getattr(self, field) or {}):
                if (why := _key_problem(key, reserved=field != "node_selector")) is not None:
                    return f"{field}.{key}", why
        for i, toleration in enumerate(self.tolerations or []):
            if toleration.key is not None and (why := _key_problem(toleration.key)) is not None:
                return f"tolerations[{i}].key", why
            if (problem := toleration.problem()) is not None:
                return f"tolerations[{i}].{problem[0]}", problem[1]
        return None


def _key_problem(key: str, *, reserved: bool = False) -> str | None:
    """Kubernetes' length rules for a qualified name's prefix, and the reserved prefixes."""
    prefix, _, _name = key.rpartition("/")
    if len(prefix) > 253 or any(len(part) > 63 for part in prefix.split(".")):
        return "its prefix is not a DNS subdomain (at most 253 characters, 63 a part)"
    if reserved and any(prefix == r or prefix.endswith(f".{r}") for r in _RESERVED):
        return f"the {prefix}/ prefix is reserved (the gateway's or Kubernetes' own)"
    return None
