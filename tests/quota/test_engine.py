"""The engine's public API beyond scenarios: reasons, errors, lifecycle."""

from __future__ import annotations

import pytest

from quota import (
    ClusterQueueSpec,
    CohortSpec,
    ConfigError,
    FlavorQuotas,
    PodSet,
    PreemptionPolicy,
    QuotaConfig,
    QuotaEngine,
    ReasonCode,
    ResourceGroup,
    ResourceQuota,
    Workload,
    WorkloadError,
    parse_quota_config,
)
from quota.model import Admission, PodSetAssignment, ReclaimWithinCohort, WithinClusterQueue
from quota.reasons import BlockerLevel

GPU = "nvidia.com/gpu"


def gpu_queue(
    name: str, nominal: int, *, cohort: str | None = None, **kw: object
) -> ClusterQueueSpec:
    limit = kw.pop("borrowing_limit", None)
    group = ResourceGroup(
        resources=(GPU,),
        flavors=(FlavorQuotas("h100", {GPU: ResourceQuota(nominal * 1000, limit)}),),  # type: ignore[arg-type]
    )
    return ClusterQueueSpec(name=name, cohort=cohort, resource_groups=(group,), **kw)  # type: ignore[arg-type]


def job(name: str, queue: str, gpus: int, created: float = 0, priority: int = 0) -> Workload:
    pod_set = PodSet("main", count=gpus, requests={GPU: 1000})
    return Workload(name, queue, (pod_set,), priority=priority, created=created)


def engine(*queues: ClusterQueueSpec) -> QuotaEngine:
    cohorts = tuple(CohortSpec(c) for c in {q.cohort for q in queues if q.cohort})
    config = QuotaConfig(flavors=("h100",), cohorts=cohorts, cluster_queues=queues)
    return QuotaEngine(config, clock=iter(range(1, 10**6)).__next__)  # type: ignore[arg-type]


def test_reason_names_the_cohort_and_resource_that_block() -> None:
    e = engine(gpu_queue("a", 4, cohort="org"), gpu_queue("b", 4, cohort="org"))
    e.add(job("big", "a", 6))
    e.schedule()
    e.add(job("huge", "b", 4))  # within b's nominal, but a borrowed two of b's GPUs
    e.schedule()
    assert set(e.admitted) == {"big"}
    reason = e.reason("huge")
    # b's request is within its nominal quota, but its policy lets it preempt nobody
    assert reason is not None and reason.code is ReasonCode.NO_PREEMPTION_CANDIDATES
    blocker = reason.blockers[0]
    assert (blocker.level, blocker.name, blocker.resource, blocker.flavor) == (
        BlockerLevel.COHORT,
        "org",
        GPU,
        "h100",
    )
    assert "2 available" in reason.message


def test_reason_names_the_queue_whose_borrowing_limit_binds() -> None:
    e = engine(
        gpu_queue("a", 2, cohort="org", borrowing_limit=1000), gpu_queue("b", 8, cohort="org")
    )
    e.add(job("w", "a", 4))
    e.schedule()
    reason = e.reason("w")
    assert reason is not None
    assert (reason.blockers[0].level, reason.blockers[0].name) == (BlockerLevel.CLUSTER_QUEUE, "a")


def test_a_request_above_what_the_tree_could_ever_give_is_said_so() -> None:
    e = engine(gpu_queue("a", 2))
    e.add(job("w", "a", 3))
    e.schedule()
    reason = e.reason("w")
    assert reason is not None and reason.code is ReasonCode.EXCEEDS_MAX_QUOTA


def test_stopped_queue_admits_nothing_and_says_why() -> None:
    e = engine(gpu_queue("a", 8, stopped=True))
    e.add(job("w", "a", 1))
    assert e.schedule_once().admitted == []
    reason = e.reason("w")
    assert reason is not None and reason.code is ReasonCode.QUEUE_STOPPED


def test_finish_releases_quota_and_the_next_workload_gets_it() -> None:
    e = engine(gpu_queue("a", 4))
    e.add(job("first", "a", 4, created=1))
    e.add(job("second", "a", 4, created=2))
    e.schedule()
    assert set(e.admitted) == {"first"}
    e.finish("first")
    e.schedule()
    assert set(e.admitted) == {"second"}
    assert e.reason("second") is None


def test_workloads_set_aside_with_a_head_tell_its_reason_until_tried_themselves() -> None:
    e = engine(gpu_queue("a", 4))
    e.add(job("running", "a", 4, created=0))
    e.schedule()
    for name, created in (("w1", 1), ("w2", 2), ("w3", 3)):
        e.add(job(name, "a", 2, created=created))
    e.add(job("big", "a", 3, created=4))  # another class: tried on its own
    e.schedule()
    head = e.reason("w1")
    assert head is not None and head.code is ReasonCode.NO_PREEMPTION_CANDIDATES
    assert e.reason("w2") is head and e.reason("w3") is head
    # Shared with workloads of other submitters alike: it names quota, never the head.
    assert "w1" not in head.message and all("w1" not in str(d) for d in head.detail())
    assert head.detail()[0]["code"] == "InsufficientQuota" and hash(head) == hash(e.reason("w3"))
    assert e.reason("big") is not head and "3" in e.reason("big").message  # type: ignore[union-attr]
    e.add(job("late", "a", 2, created=5))  # joins the set-aside class after the fact
    assert e.reason("late").code is ReasonCode.QUEUED  # type: ignore[union-attr]
    e.finish("running")
    e.schedule()  # w1 and w2 run; w3 is tried again, on its own
    assert set(e.admitted) == {"w1", "w2"}
    again = e.reason("w3")
    assert again is not None and again is not head and "0 available" in again.message


def test_errors_for_impossible_operations() -> None:
    e = engine(gpu_queue("a", 4))
    e.add(job("w", "a", 8))
    with pytest.raises(WorkloadError, match="not admitted"):
        e.finish("w")
    with pytest.raises(WorkloadError, match="already exists"):
        e.add(job("w", "a", 1))
    with pytest.raises(WorkloadError, match="unknown cluster queue"):
        e.add(job("x", "nope", 1))
    with pytest.raises(WorkloadError, match="neither pending nor admitted"):
        e.delete("ghost")
    e.delete("w")
    assert list(e.pending()) == []


@pytest.mark.parametrize(
    "pod_set",
    [PodSet("main", -1, {GPU: 1}), PodSet("main", 2, {GPU: -1000})],
)
def test_a_negative_amount_is_refused_before_it_reaches_the_quota_arithmetic(
    pod_set: PodSet,
) -> None:
    # A negative amount would give quota back by being admitted; the preemption
    # searches' early exits assume none.
    e = engine(gpu_queue("a", 4))
    with pytest.raises(WorkloadError, match="negative amount"):
        e.add(Workload("w", "a", (pod_set,)))
    with pytest.raises(WorkloadError, match="negative amount"):
        e.add_admitted(
            Workload("w", "a", (pod_set,)),
            Admission("a", (PodSetAssignment("main", 1, {GPU: "h100"}),)),
        )
    assert list(e.pending()) == [] and not e.admitted


def test_an_older_arrival_is_tried_even_when_an_equivalent_newer_one_was_set_aside() -> None:
    """LowerOrNewerEqualPriority makes creation time matter, so workloads alike in
    priority and pod sets are not alike there (found by the property tests)."""
    spec = gpu_queue(
        "q", 1, preemption=PreemptionPolicy(WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY)
    )
    e = engine(spec)
    e.add(job("adm", "q", 1, created=5))
    e.schedule()
    e.add(job("new", "q", 1, created=10))
    e.schedule()  # `new` cannot evict the older `adm`: set aside
    e.add(job("old", "q", 1, created=1))
    e.schedule()  # `old` is older than `adm`, so it may evict it
    assert set(e.admitted) == {"old"}
    assert {w.name for w in e.pending()} == {"adm", "new"}


def test_a_quota_configuration_loads_from_plain_data() -> None:
    config = parse_quota_config(
        {
            "flavors": ["h100"],
            "cohorts": [{"name": "org"}],
            "cluster_queues": [
                {
                    "name": "a",
                    "cohort": "org",
                    "resource_groups": [
                        {
                            "resources": [GPU],
                            "flavors": [{"name": "h100", "quotas": {GPU: {"nominal": 8}}}],
                        }
                    ],
                }
            ],
        }
    )
    e = QuotaEngine(config)
    e.add(job("w", "a", 8))
    assert e.schedule_once().admitted == ["w"]
    wrong_type = r"cluster_queues\[0\]\.cohort: expected `str \| null`, got `int`"
    with pytest.raises(ConfigError, match=wrong_type):
        parse_quota_config({"cluster_queues": [{"name": "a", "cohort": 3}]})


def test_the_public_api_is_what_it_says() -> None:
    import quota

    assert sorted(quota.__all__) == quota.__all__
    assert all(hasattr(quota, name) for name in quota.__all__)


def test_a_preempted_workload_queues_behind_those_waiting_since_before_its_eviction() -> None:
    # Kueue orders an evicted workload by its eviction time: were it ordered by its
    # creation, the victim would come back ahead of workloads that waited while it ran.
    reclaim = PreemptionPolicy(reclaim_within_cohort=ReclaimWithinCohort.ANY)
    e = engine(
        gpu_queue("lender", 4, cohort="org", preemption=reclaim),
        gpu_queue("borrower", 0, cohort="org"),
    )
    e.add(job("early", "borrower", 4, created=1))
    e.schedule()
    assert set(e.admitted) == {"early"}
    e.add(job("later", "borrower", 4, created=2))
    e.add(job("owner", "lender", 4, created=3))
    e.schedule()
    assert set(e.admitted) == {"owner"}
    assert e.preemption("early") is not None
    pending = {w.name: w for w in e.pending()}
    assert pending["early"].order_time > pending["later"].order_time
    e.finish("owner")
    e.schedule()
    assert set(e.admitted) == {"later"}
