"""The Kubernetes backend's calls over HTTP, through the real client (lightkube), against
a FAKE API server (tests/support/kube_api.py) that speaks the Kubernetes REST protocol for
the paths used: create (409 AlreadyExists adopts), get, delete with foreground propagation
(404: already gone), list + watch with resourceVersion (resumed when the server ends it,
listed again on 410 Gone), pod logs. No real API server can run on this machine."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.backends import (
    BackendUnavailableError,
    JobRejectedError,
    JobSpec,
    JobState,
    PodShape,
)
from gateway.backends.kubernetes import KubernetesBackend, KubernetesJobSettings, load_config
from gateway.backends.kubernetes.client import KubernetesError, WatchGoneError
from gateway.backends.kubernetes.mapping import manifest
from tests.kubernetes.conftest import SETTINGS
from tests.kubernetes.schemas import validate_job
from tests.support.kube_api import FakeKubeApi

Make = Callable[..., KubernetesBackend]
T0 = "2026-11-25T10:00:00Z"
T1 = "2026-11-25T10:05:00Z"


def gang(name: str = "abc123-1", *pods: PodShape) -> JobSpec:
    return JobSpec(
        name,
        ("python", "train.py"),
        {"SEED": "1"},
        600,
        pods=pods or (PodShape(2, gpus=1, name="w", flavor="h100"),),
        tenant="acme",
        queue="team-a",
    )


async def until(check: Callable[[], bool]) -> None:
    """Wait (bounded) for something the backend does in the background."""
    async with asyncio.timeout(10):
        while not check():
            await asyncio.sleep(0.01)


async def test_a_gang_becomes_a_job_followed_to_its_end(
    api: FakeKubeApi, make_backend: Make
) -> None:
    backend = make_backend(follow=False)
    job = gang()
    await backend.submit(job)
    sent = next(r for r in api.requests if r.method == "POST")
    assert sent.path == "/apis/batch/v1/namespaces/training/jobs"
    assert sent.body == manifest(job, SETTINGS)  # what lightkube sent is what was built
    validate_job(sent.body)
    status = await backend.status("abc123-1")
    assert (status.state, status.backend_job_id) == (JobState.PENDING, "training/abc123-1")
    api.set_status("jobs", "abc123-1", {"active": 2, "ready": 2, "startTime": T0})
    assert (await backend.status("abc123-1")).state is JobState.RUNNING
    api.set_status(
        "jobs",
        "abc123-1",
        {
            "succeeded": 2,
            "startTime": T0,
            "completionTime": T1,
            "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": T1}],
        },
    )
    done = await backend.status("abc123-1")
    assert (done.state, done.exit_code, done.backend_state) == (JobState.SUCCEEDED, 0, "Complete")
    assert done.started_at is not None and done.finished_at is not None


async def test_a_second_submit_adopts_the_job_after_409_already_exists(
    api: FakeKubeApi, make_backend: Make
) -> None:
    assert await make_backend(follow=False).submit(gang()) is False
    # A gateway restarted before it noted the submission submits again: no second job,
    # and the dispatcher is told it adopted one.
    assert await make_backend(follow=False).submit(gang()) is True
    posts = [r for r in api.requests if r.method == "POST"]
    assert len(posts) == 2
    assert [key for key in api.objects if key[0] == "jobs"] == [("jobs", "abc123-1")]


async def test_cancel_deletes_in_the_foreground_and_a_missing_job_is_already_gone(
    api: FakeKubeApi, make_backend: Make
) -> None:
    backend = make_backend(follow=False)
    await backend.submit(gang())
    api.hold_deletions = True  # the pods take a while to go
    await backend.cancel("abc123-1")
    delete = next(r for r in api.requests if r.method == "DELETE")
    assert delete.path == "/apis/batch/v1/namespaces/training/jobs/abc123-1"
    assert delete.query["propagationPolicy"] == "Foreground"
    stopping = await backend.status("abc123-1")
    assert (stopping.state, stopping.backend_state) == (JobState.RUNNING, "Terminating")
    api.collect_garbage()
    assert (await backend.status("abc123-1")).state is JobState.UNKNOWN
    await backend.cancel("abc123-1")  # 404 on delete: nothing to do
    await make_backend(follow=False).cancel("never-1")  # neither a Job nor a JobSet of that name
    assert [r for r in api.requests if r.method == "DELETE"][-2:] == [
        r for r in api.requests if r.method == "DELETE" and "never-1" in r.path
    ]


async def test_several_pod_sets_become_a_jobset_followed_by_its_conditions(
    api: FakeKubeApi, make_backend: Make
) -> None:
    backend = make_backend(follow=False)
    job = gang("abc123-2", PodShape(1, name="launcher"), PodShape(4, gpus=8, name="workers"))
    await backend.submit(job)
    assert api.get("jobsets", "abc123-2") is not None
    api.set_status(
        "jobsets",
        "abc123-2",
        {"replicatedJobsStatus": [{"name": "launcher", "active": 1, "ready": 1}]},
    )
    assert (await backend.status("abc123-2")).state is JobState.RUNNING
    failed = {"type": "Failed", "status": "True", "message": "jobset failed due to failed jobs"}
    api.set_status("jobsets", "abc123-2", {"conditions": [failed]})
    # A fresh backend (a restarted gateway) finds it without knowing its kind.
    status = await make_backend(follow=False).status("abc123-2")
    assert (status.state, status.message) == (
        JobState.FAILED,
        "JobSet failed: jobset failed due to failed jobs",
    )
    await backend.cancel("abc123-2")
    assert api.get("jobsets", "abc123-2") is None


async def test_logs_are_the_tails_of_the_jobs_pods(api: FakeKubeApi, make_backend: Make) -> None:
    backend = make_backend(follow=False)
    await backend.submit(gang())
    assert await backend.logs("abc123-1") == b""  # no pod yet
    labels = {"ignara.io/job": "abc123-1"}
    api.add_pod("abc123-1-0-xxxxx", labels, "".join(f"step {i}\n" for i in range(100)))
    api.add_pod("abc123-1-1-yyyyy", labels, "worker one\n")
    api.add_pod("other-0-zzzzz", {"ignara.io/job": "other"}, "not ours\n")
    logs = await backend.logs("abc123-1")
    assert logs.startswith(b"==> pod abc123-1-0-xxxxx <==\n") and b"step 99\n" in logs
    assert logs.endswith(b"==> pod abc123-1-1-yyyyy <==\nworker one\n")
    assert b"not ours" not in logs
    assert len(await backend.logs("abc123-1", tail_bytes=11)) == 11


async def test_the_follower_resumes_a_watch_from_its_version_and_relists_on_410(
    api: FakeKubeApi, make_backend: Make
) -> None:
    backend = make_backend()
    await backend.submit(gang())  # starts following
    jobs = backend.followers["Job"]
    await until(lambda: jobs.get("abc123-1") is not None)
    assert api.lists_of("jobs") == 1
    api.set_status("jobs", "abc123-1", {"active": 2, "ready": 2, "startTime": T0})
    await until(lambda: (jobs.get("abc123-1") or {}).get("status", {}).get("ready") == 2)
    gets = len([r for r in api.requests if r.path.endswith("/jobs/abc123-1")])
    assert (await backend.status("abc123-1")).state is JobState.RUNNING
    assert len([r for r in api.requests if r.path.endswith("/jobs/abc123-1")]) == gets  # cached

    # The server ends the watch (its timeoutSeconds): resumed from the last version seen.
    seen = api.version
    api.end_watches()
    await until(lambda: len(api.watches_from("jobs")) == 2)
    assert api.watches_from("jobs")[-1] == str(seen)
    assert api.lists_of("jobs") == 1  # resumed, not listed again
    api.set_status("jobs", "abc123-1", {"active": 1, "ready": 1, "startTime": T0})
    await until(lambda: (jobs.get("abc123-1") or {}).get("status", {}).get("ready") == 1)

    # The server forgets that version (410 Gone): the follower lists again, and a job
    # deleted meanwhile drops out, which the watch alone would never say.
    api.compact()
    await until(lambda: jobs.synced and jobs.lists == 2)
    assert api.lists_of("jobs") == 2
    # ... and watches from the new list's version.
    await until(lambda: api.watches_from("jobs")[-1] == str(api.compacted))
    await backend.submit(gang("abc123-3"))
    await until(lambda: jobs.get("abc123-3") is not None)


async def test_a_job_deleted_during_a_410_gap_is_gone_after_the_relist(
    api: FakeKubeApi, make_backend: Make
) -> None:
    backend = make_backend()
    await backend.submit(gang())
    jobs = backend.followers["Job"]
    await until(lambda: jobs.get("abc123-1") is not None)
    api.end_watches()
    api._watches.clear()
    # Deleted while the follower's next watch was not yet open, and the history compacted.
    api.objects.pop(("jobs", "abc123-1"))
    api.compact()
    await until(lambda: jobs.lists == 2)
    assert jobs.get("abc123-1") is None
    assert (await backend.status("abc123-1")).state is JobState.UNKNOWN


async def test_an_unreachable_server_or_bad_credentials_make_the_workload_wait(
    api: FakeKubeApi, make_backend: Make, tmp_path: Path
) -> None:
    kubeconfig = api.kubeconfig(tmp_path)
    text = kubeconfig.read_text()
    wrong = tmp_path / "wrong-token"
    wrong.write_text(text.replace("fake-token", "stolen"))
    refused = KubernetesBackend("k8s", SETTINGS, lambda: load_config(str(wrong), None, False))
    with pytest.raises(BackendUnavailableError, match="credentials"):
        await refused.submit(gang())
    await refused.close()
    assert "stolen" not in "".join(str(r.query) for r in api.requests)

    down = tmp_path / "down"
    down.write_text(text.replace(api.url, "http://127.0.0.1:9"))
    nowhere = KubernetesBackend(
        "k8s", SETTINGS, lambda: load_config(str(down), None, False), follow=False
    )
    with pytest.raises(BackendUnavailableError, match="cannot reach"):
        await nowhere.status("abc123-1")
    await nowhere.close()

    for broken, said in [
        (tmp_path / "missing", "cannot use the kubeconfig"),
        (kubeconfig, "Context 'nope' not found"),
    ]:
        context = "nope" if broken == kubeconfig else None
        unread = KubernetesBackend(
            "k8s", SETTINGS, lambda b=broken, c=context: load_config(str(b), c, False)
        )
        with pytest.raises(BackendUnavailableError, match=said):
            await unread.submit(gang())
        await unread.close()
    assert [r for r in api.requests if r.method == "POST"] == [
        r for r in api.requests if r.method == "POST" and r.path.endswith("/jobs")
    ]


async def test_a_gang_of_pod_sets_without_jobset_is_rejected_before_any_call(
    api: FakeKubeApi, make_backend: Make
) -> None:
    settings = KubernetesJobSettings("training", "img:1", use_jobset=False)
    backend = make_backend(settings=settings, follow=False)
    with pytest.raises(JobRejectedError):
        await backend.submit(gang("abc123-4", PodShape(1, name="a"), PodShape(1, name="b")))
    assert api.requests == []


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (400, JobRejectedError),
        (422, JobRejectedError),
        (403, BackendUnavailableError),
        (429, BackendUnavailableError),
        (503, BackendUnavailableError),
        (410, WatchGoneError),
        (405, KubernetesError),
    ],
)
def test_api_refusals_map_to_backend_errors(code: int, error: type[Exception]) -> None:
    import httpx2

    from gateway.backends.kubernetes.client import _error

    request = httpx2.Request("POST", "http://127.0.0.1/apis/batch/v1/namespaces/x/jobs")
    response = httpx2.Response(code, request=request)
    refusal = httpx2.HTTPStatusError("x", request=request, response=response)
    assert type(_error("creating", refusal, creating=True)) is error
    # Only a create is rejected for good: a refused read or list makes the workload wait.
    if error is JobRejectedError:
        assert type(_error("reading", refusal)) is KubernetesError


async def test_refusals_mean_the_same_under_another_content_type(
    api: FakeKubeApi, make_backend: Make
) -> None:
    """A proxy that adds a charset to the API server's Status bodies changes nothing: 409
    still adopts, 404 is still gone, 401 still waits."""
    api.status_content_type = "application/json; charset=utf-8"
    backend = make_backend(follow=False)
    await backend.submit(gang())
    await backend.submit(gang())  # 409: adopted
    await backend.cancel("abc123-1")
    await backend.cancel("abc123-1")  # 404: already gone
    assert (await backend.status("abc123-1")).state is JobState.UNKNOWN


async def test_a_watch_refused_with_http_410_lists_again(
    api: FakeKubeApi, make_backend: Make
) -> None:
    api.gone_as_http = True
    backend = make_backend()
    await backend.submit(gang())
    jobs = backend.followers["Job"]
    await until(lambda: jobs.get("abc123-1") is not None)
    api.compact()
    await until(lambda: jobs.lists == 2 and jobs.synced)
    assert api.lists_of("jobs") == 2


async def test_a_failed_job_reports_the_exit_code_of_its_failed_pod(
    api: FakeKubeApi, make_backend: Make
) -> None:
    backend = make_backend(follow=False)
    await backend.submit(gang())
    labels = {"ignara.io/job": "abc123-1"}
    api.add_pod("abc123-1-0-aaaaa", labels, "", exit_code=0)
    api.add_pod("abc123-1-1-bbbbb", labels, "", exit_code=3)
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit",
    }
    api.set_status("jobs", "abc123-1", {"failed": 1, "conditions": [failed]})
    status = await backend.status("abc123-1")
    assert (status.state, status.exit_code) == (JobState.FAILED, 3)
    assert status.message == (
        "Job failed: Job has reached the specified backoff limit "
        "(pod abc123-1-1-bbbbb exited with 3)"
    )
