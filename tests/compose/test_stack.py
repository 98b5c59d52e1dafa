"""The compose stack of deploy/compose/, end to end from the host (`make compose-test`).

One tenant, made through the admin API, calls the model through each replica with its token
quota shared in Redis, runs a 2-pod GPU gang on the compose Slurm, is refused by the OPA
service's policy, is seen by Prometheus; then the admission leader is killed and the other
replica takes admission over. The tests run in file order and share the stack."""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.support.compose import COMPOSE_DIR, Stack

MODEL = "llama-3.1-8b-instruct"
REPLICAS = ("gateway-1", "gateway-2")


def _env_file() -> dict[str, str]:
    values = {}
    for line in (COMPOSE_DIR / ".env").read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and not name.startswith("#"):
            values[name.strip()] = value.strip()
    return values


ENV = _env_file() if (COMPOSE_DIR / ".env").exists() else {}


def _port(name: str, default: int) -> int:
    return int(ENV.get(name, default))


PROXY = f"http://127.0.0.1:{_port('IGNARA_COMPOSE_PORT', 18080)}"
REPLICA_URLS = {
    "gateway-1": f"http://127.0.0.1:{_port('IGNARA_GATEWAY_1_PORT', 18081)}",
    "gateway-2": f"http://127.0.0.1:{_port('IGNARA_GATEWAY_2_PORT', 18082)}",
}
PROMETHEUS = f"http://127.0.0.1:{_port('IGNARA_PROMETHEUS_PORT', 19090)}"
OPA = f"http://127.0.0.1:{_port('IGNARA_OPA_PORT', 18181)}"


def _wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except httpx.HTTPError as err:
            last = err
        else:
            if last:
                return last
        time.sleep(0.5)
    raise AssertionError(f"{what} within {timeout:.0f} s; last: {last!r}")


class Tenant:
    def __init__(self, name: str, queue: str, token: str) -> None:
        self.name, self.queue, self.token = name, queue, token
        self.headers = {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def admin() -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {ENV['IGNARA_ADMIN_KEY']}"}
    with httpx.Client(base_url=PROXY, headers=headers, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def tenant(admin: httpx.Client) -> Tenant:
    """A tenant of its own queue (2,000 tokens a minute; 8 GPUs of the Slurm flavor) and
    a member key, all through the admin API; at most 2 GPUs per workload (policy)."""
    suffix = secrets.token_hex(3)
    queue, name = f"compose-{suffix}", f"compose-{suffix}"
    created = admin.post(
        "/api/v1/admin/config/cluster-queues",
        json={
            "name": queue,
            "resource_groups": [
                {
                    "resources": ["nvidia.com/gpu", "cpu"],
                    "flavors": [
                        {
                            "name": "h100",
                            "quotas": {"nvidia.com/gpu": {"nominal": 8}, "cpu": {"nominal": "16"}},
                        }
                    ],
                },
                {
                    "resources": ["tokens-per-minute", "requests-per-minute"],
                    "flavors": [
                        {
                            "name": "llama-pool",
                            "quotas": {
                                "tokens-per-minute": {"nominal": 2000},
                                "requests-per-minute": {"nominal": 100},
                            },
                        }
                    ],
                },
            ],
        },
    )
    assert created.status_code == 201, created.text
    made = admin.post(
        "/api/v1/admin/tenants",
        json={
            "name": name,
            "display_name": "compose test",
            "queues": [queue],
            "limits": {"max_gpus_per_workload": 2},
        },
    )
    assert made.status_code == 201, made.text
    key = admin.post(
        f"/api/v1/admin/tenants/{name}/keys",
        json={"principal": "compose-test", "roles": ["member"]},
    )
    assert key.status_code == 201, key.text
    return Tenant(name, queue, key.json()["token"])


def _granted(base: str, tenant: Tenant, max_tokens: int) -> Callable[[], httpx.Response | None]:
    """A check for `_wait_for`: the call's answer when it was a 200."""

    def call() -> httpx.Response | None:
        answer = _chat(base, tenant, max_tokens)
        return answer if answer.status_code == 200 else None

    return call


def _chat(base: str, tenant: Tenant, max_tokens: int) -> httpx.Response:
    return httpx.post(
        f"{base}/v1/chat/completions",
        headers=tenant.headers,
        json={
            "model": MODEL,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "hello"}],
        },
        timeout=30,
    )


def _readyz(replica: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{REPLICA_URLS[replica]}/readyz", timeout=5).json()
    return body


def test_both_replicas_ready_and_one_leads() -> None:
    states = {replica: _readyz(replica) for replica in REPLICAS}
    assert all(s["status"] == "ready" for s in states.values()), states
    assert sorted(s["admission_leader"] for s in states.values()) == [False, True], states


def test_inference_through_each_replica_shares_the_quota_in_redis(tenant: Tenant) -> None:
    for replica in REPLICAS:
        answer = _wait_for(
            f"{replica} answering the new tenant's call",
            _granted(REPLICA_URLS[replica], tenant, 50),
        )
        assert answer.json()["usage"]["total_tokens"] == 21
    # A streamed call through gateway-1 reserves 1,500 of the queue's 2,000 tokens a minute
    # for as long as it streams (the fake model writes for 2 s); gateway-2 sees that
    # reservation in Redis and refuses a second such call, then grants it once the first
    # was settled at what it used (21 tokens).
    with httpx.stream(
        "POST",
        f"{REPLICA_URLS['gateway-1']}/v1/chat/completions",
        headers=tenant.headers,
        json={
            "model": MODEL,
            "max_tokens": 1500,
            "stream": True,
            "messages": [{"role": "user", "content": "hello"}],
        },
        timeout=30,
    ) as stream:
        assert stream.status_code == 200
        lines = stream.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
        refused = _chat(REPLICA_URLS["gateway-2"], tenant, 1500)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"], refused.text
        for _ in lines:
            pass
    granted = _wait_for(
        "gateway-2 granting once gateway-1's stream settled",
        _granted(REPLICA_URLS["gateway-2"], tenant, 1500),
        timeout=10,
    )
    assert granted.json()["usage"]["completion_tokens"] == 8


def _gang(tenant: Tenant, pods: int, name: str) -> httpx.Response:
    return httpx.post(
        f"{PROXY}/api/v1/workloads",
        headers={**tenant.headers, "Idempotency-Key": f"{name}-{secrets.token_hex(4)}"},
        json={
            "name": name,
            "queue": tenant.queue,
            "pod_sets": [
                {"name": "workers", "count": pods, "requests": {"nvidia.com/gpu": 1, "cpu": "1"}}
            ],
            "max_runtime_seconds": 300,
            "job": {"command": ["sh", "-c", "echo pod $SLURM_PROCID gpus $CUDA_VISIBLE_DEVICES"]},
        },
        timeout=30,
    )


def _finished(tenant: Tenant, workload_id: str, timeout: float = 120.0) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        body: dict[str, Any] = httpx.get(
            f"{PROXY}/api/v1/workloads/{workload_id}", headers=tenant.headers, timeout=10
        ).json()
        assert body["state"] not in ("failed", "cancelled"), body
        return body if body["state"] == "succeeded" else None

    result: dict[str, Any] = _wait_for(f"workload {workload_id} succeeded", done, timeout)
    return result


def test_a_two_pod_gpu_gang_runs_on_the_compose_slurm(tenant: Tenant) -> None:
    submitted = _gang(tenant, 2, "compose-gang")
    assert submitted.status_code == 201, submitted.text
    workload = _finished(tenant, submitted.json()["id"])
    assert workload["backend"] == "hpc", workload
    assert workload["backend_state"] == "COMPLETED", workload
    assert workload["backend_job_id"], workload
    logs = httpx.get(
        f"{PROXY}/api/v1/workloads/{workload['id']}/logs", headers=tenant.headers, timeout=10
    )
    assert logs.status_code == 200, logs.text
    assert "pod 0 gpus" in logs.text and "pod 1 gpus" in logs.text, logs.text


def test_the_opa_service_decides(tenant: Tenant) -> None:
    # The OPA service started empty: the gateway pushed its policies there.
    refused = _gang(tenant, 3, "too-many-gpus")
    assert refused.status_code == 403, refused.text
    assert "max_gpus_per_workload" in refused.text or "GPUs" in refused.text, refused.text
    # Frozen, the OPA service decides nothing: the gateway fails closed after its policy
    # timeout, so the decisions above were the service's, not an embedded engine's.
    stack = Stack()
    stack.run("pause", "opa")
    try:
        frozen = _gang(tenant, 1, "while-opa-is-frozen")
        assert frozen.status_code == 403, frozen.text
        assert "denying by default" in frozen.json()["error"]["message"], frozen.text
    finally:
        stack.run("unpause", "opa")
    allowed = _gang(tenant, 1, "after-opa-is-back")
    assert allowed.status_code == 201, allowed.text


def _prometheus(query: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{PROMETHEUS}/api/v1/query", params={"query": query}, timeout=10)
    answer.raise_for_status()
    result: list[dict[str, Any]] = answer.json()["data"]["result"]
    return result


def test_prometheus_scrapes_every_replica() -> None:
    for replica, url in REPLICA_URLS.items():
        exposition = httpx.get(f"{url}/metrics", timeout=5)
        assert exposition.status_code == 200, (replica, exposition.text[:200])
        assert "ignara_admission_leader" in exposition.text, replica

    def up() -> dict[str, str] | None:
        series = _prometheus('up{job="ignara-gateway"}')
        values = {s["metric"]["replica"]: s["value"][1] for s in series}
        return values if values == dict.fromkeys(REPLICAS, "1") else None

    _wait_for("Prometheus scraping both replicas successfully", up)
    for replica in REPLICAS:
        query = f'ignara_http_requests_total{{job="ignara-gateway",replica="{replica}"}}'
        _wait_for(
            f"{replica}'s request series in Prometheus", functools.partial(_prometheus, query)
        )

    # Exactly one replica leads admission, and Prometheus sees which.
    def one_leader() -> list[dict[str, Any]] | None:
        leaders = _prometheus('sum(ignara_admission_leader{job="ignara-gateway"})')
        return leaders if leaders and leaders[0]["value"][1] == "1" else None

    _wait_for("one admission leader in Prometheus", one_leader)


def test_the_other_replica_takes_admission_over_when_the_leader_dies(tenant: Tenant) -> None:
    leader = next(r for r in REPLICAS if _readyz(r)["admission_leader"])
    other = next(r for r in REPLICAS if r != leader)
    Stack().run("kill", "-s", "SIGKILL", leader)
    _wait_for(f"{other} leading admission", lambda: _readyz(other)["admission_leader"])
    submitted = _gang(tenant, 2, "after-failover")
    assert submitted.status_code == 201, submitted.text
    workload = _finished(tenant, submitted.json()["id"])
    assert workload["backend_state"] == "COMPLETED", workload
    # The proxy sends calls to the replica left.
    assert _chat(PROXY, tenant, 50).status_code == 200
