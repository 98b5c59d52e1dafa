"""`ignara replay`'s pure side: the trace, the policies, the simulation and its metrics."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from quota.config import parse_quota_config
from quota.model import QuotaConfig
from quota.replay.metrics import bucketed, distribution, percentile, step_mean, summarize
from quota.replay.policies import (
    PolicyError,
    check_policy,
    nominal_gpus,
    quota_document,
    scale_config,
)
from quota.replay.report import comparison_markdown, render_html
from quota.replay.simulation import JobRecord, ReplayResult, UsageSample, replay, workload_of
from quota.replay.trace import TraceError, TraceJob, load_trace, parse_team_sizes, parse_trace

FIXTURES = Path(__file__).parent / "replay_fixtures"
T0 = datetime(2017, 10, 1, tzinfo=UTC)


def config(policy: str, **gpus: int) -> QuotaConfig:
    """The policy's quota file with teams of exactly ``gpus`` GPUs each."""
    document = quota_document(dict.fromkeys(gpus, 1), policy)
    for queue in document["cluster_queues"]:
        quota = queue["resource_groups"][0]["flavors"][0]["quotas"]["nvidia.com/gpu"]
        quota["nominal"] = gpus[queue["name"]]
    return parse_quota_config(document)


def job(line: int, team: str, at: float, duration: float, gpus: int) -> TraceJob:
    return TraceJob(line, team, T0 + timedelta(seconds=at), duration, gpus)


def by_name(result: ReplayResult) -> dict[str, JobRecord]:
    return {r.name: r for r in result.jobs}


# -- metrics --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "q", "want"),
    [
        ([], 50, None),
        ([7.0], 99, 7.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.0),
        ([1.0, 2.0, 3.0, 4.0], 75, 3.0),
        ([1.0, 2.0, 3.0, 4.0], 76, 4.0),
        ([float(i) for i in range(1, 101)], 95, 95.0),
        ([float(i) for i in range(1, 101)], 99, 99.0),
        ([float(i) for i in range(1, 101)], 100, 100.0),
    ],
)
def test_percentile_is_nearest_rank(values: list[float], q: float, want: float | None) -> None:
    assert percentile(values, q) == want


def test_distribution_of_nothing_and_of_values() -> None:
    assert distribution([]) == {
        "count": 0, "mean": None, "p50": None, "p95": None, "p99": None, "max": None
    }  # fmt: skip
    assert distribution([3.0, 1.0, 2.0]) == {
        "count": 3, "mean": 2.0, "p50": 2.0, "p95": 3.0, "p99": 3.0, "max": 3.0
    }  # fmt: skip


STEPS = [UsageSample(10.0, 4, 0), UsageSample(20.0, 8, 2), UsageSample(30.0, 0, 0)]


@pytest.mark.parametrize(
    ("start", "stop", "want"),
    [
        (0.0, 10.0, (0.0, 0.0)),  # before the first sample nothing is held
        (10.0, 20.0, (4.0, 0.0)),
        (10.0, 30.0, (6.0, 1.0)),
        (0.0, 40.0, ((4 * 10 + 8 * 10) / 40, 20 / 40)),
        (15.0, 25.0, (6.0, 1.0)),
        (30.0, 30.0, (0.0, 0.0)),
    ],
)
def test_step_mean_is_time_weighted(start: float, stop: float, want: tuple[float, float]) -> None:
    assert step_mean(STEPS, start, stop) == pytest.approx(want)


def test_buckets_average_the_steps_within_them() -> None:
    assert bucketed(STEPS, 0.0, 40.0, 4) == [
        (0.0, 0.0, 0.0),
        (10.0, 4.0, 0.0),
        (20.0, 8.0, 2.0),
        (30.0, 0.0, 0.0),
    ]
    # a bucket that straddles a change holds the time-weighted mean
    assert bucketed(STEPS, 0.0, 40.0, 2) == [(0.0, 2.0, 0.0), (20.0, 4.0, 1.0)]
    # the whole is conserved whatever the bucket count (float edges included)
    for buckets in (3, 7, 400):
        series = bucketed(STEPS, 0.0, 40.0, buckets)
        width = 40.0 / buckets
        assert sum(u for _, u, _ in series) * width == pytest.approx(4 * 10 + 8 * 10)


# -- the trace ------------------------------------------------------------------------


def test_trace_is_sorted_windowed_and_tolerates_the_blank_last_line() -> None:
    text = (
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-02 00:00:00,10.0,1,10.0,b\n"
        "2017-10-01 00:00:00,20.0,16,320.0,a\n"
        "2017-10-03 00:00:00,30.0,2,60.0,a\n"
        "\n"
    )
    jobs = parse_trace(text.splitlines(keepends=True))
    assert [(j.line, j.team, j.gpus, j.duration) for j in jobs] == [
        (3, "a", 16, 20.0),
        (2, "b", 1, 10.0),
        (4, "a", 2, 30.0),
    ]
    assert jobs[0].submit == T0
    window = parse_trace(
        text.splitlines(keepends=True), start=T0 + timedelta(days=1), end=T0 + timedelta(days=2)
    )
    assert [j.line for j in window] == [2]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("yesterday,10,1,10,a", "line 2: timestamp"),
        ("2017-10-01 00:00:00,x,1,1,a", "line 2: duration and num_gpus"),
        ("2017-10-01 00:00:00,0,1,0,a", "line 2: duration 0 is out of range"),
        ("2017-10-01 00:00:00,nan,1,0,a", "out of range"),
        ("2017-10-01 00:00:00,10,0,0,a", "line 2: num_gpus 0"),
        ("2017-10-01 00:00:00,10,1.5,15,a", "num_gpus 1.5"),
        ("2017-10-01 00:00:00,10,1,10,", "line 2: no cluster"),
        ("2017-10-01 00:00:00,10", "line 2: 2 fields"),
    ],
)
def test_a_bad_row_is_refused_naming_its_line(row: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        parse_trace(["timestamp,duration,num_gpus,gpu_time,cluster\n", row + "\n"])


def test_a_trace_without_the_columns_is_refused() -> None:
    with pytest.raises(TraceError, match="no column 'num_gpus'"):
        parse_trace(["timestamp,duration,cluster\n"])
    with pytest.raises(TraceError, match="empty"):
        parse_trace([])


def test_team_sizes() -> None:
    assert parse_team_sizes(["vc,node num\n", "a,2\n", "b,16\n"]) == {"a": 2, "b": 16}
    with pytest.raises(TraceError, match="listed twice"):
        parse_team_sizes(["vc,node num\n", "a,2\n", "a,3\n"])
    with pytest.raises(TraceError, match="line 2"):
        parse_team_sizes(["vc,node num\n", "a,-2\n"])


@pytest.mark.parametrize(
    ("gpus", "pods"),
    [
        (1, [("worker", 1, 1000)]),
        (8, [("worker", 1, 8000)]),
        (12, [("node", 1, 8000), ("rest", 1, 4000)]),
        (16, [("node", 2, 8000)]),
        (128, [("node", 16, 8000)]),
    ],
)
def test_a_job_is_a_gang_of_nodes(gpus: int, pods: list[tuple[str, int, int]]) -> None:
    workload = workload_of(job(2, "a", 0, 10, gpus), created=0.0)
    assert [(p.name, p.count, p.requests["nvidia.com/gpu"]) for p in workload.pod_sets] == pods


# -- policies -------------------------------------------------------------------------


def test_policy_files_from_team_sizes() -> None:
    sizes = {"a": 2, "b": 16}
    static = parse_quota_config(quota_document(sizes, "static", 0.25))
    assert nominal_gpus(static) == {"a": 4, "b": 32}
    assert all(q.cohort is None for q in static.cluster_queues)
    cohort = parse_quota_config(quota_document(sizes, "cohort"))
    assert {q.cohort for q in cohort.cluster_queues} == {"cluster"}
    assert not cohort.fair_sharing
    assert all(q.preemption.reclaim_within_cohort.value == "Any" for q in cohort.cluster_queues)
    fair = parse_quota_config(quota_document(sizes, "cohort-fair"))
    assert fair.fair_sharing
    for policy, cfg in (("static", static), ("cohort", cohort), ("cohort-fair", fair)):
        check_policy(cfg, policy)
    with pytest.raises(PolicyError, match="is a 'cohort' configuration, not 'static'"):
        check_policy(cohort, "static")
    with pytest.raises(PolicyError, match="not 'cohort'"):
        check_policy(fair, "cohort")
    assert nominal_gpus(scale_config(cohort, 0.3)) == {"a": 5, "b": 38}  # 4.8, 38.4
    with pytest.raises(PolicyError, match="above 0"):
        scale_config(cohort, 0.0)


# -- the simulation -------------------------------------------------------------------


def test_a_job_waits_for_its_teams_quota_and_the_delay_is_measured() -> None:
    jobs = [job(2, "a", 0, 100, 4), job(3, "a", 10, 50, 2), job(4, "b", 20, 30, 1)]
    result = replay(config("static", a=4, b=4), jobs)
    records = by_name(result)
    assert (records["job-2"].first_start, records["job-2"].end) == (0.0, 100.0)
    assert (records["job-3"].wait, records["job-3"].end) == (90.0, 150.0)
    assert (records["job-4"].wait, records["job-4"].end) == (0.0, 50.0)
    summary = summarize(result)
    assert summary["queueing_delay_s"]["mean"] == pytest.approx(30.0)
    assert summary["queueing_delay_s"]["max"] == 90.0
    assert summary["jct_s"]["mean"] == pytest.approx((100 + 140 + 30) / 3)
    assert summary["waited_over_1h"] == 0.0
    # over the arrival window [0, 20): 4 GPUs for 20 s, b's job not yet in
    assert summary["utilization"]["mean_gpus"] == pytest.approx(4.0)
    assert summary["utilization"]["mean"] == pytest.approx(0.5)
    assert summary["teams"]["a"]["queueing_delay_s"]["mean"] == pytest.approx(45.0)
    assert summary["teams"]["b"]["queueing_delay_s"]["mean"] == 0.0


def test_static_never_borrows_an_idle_teams_quota() -> None:
    jobs = [job(2, "a", 0, 100, 4), job(3, "a", 0, 100, 4), job(4, "a", 0, 100, 8)]
    result = replay(config("static", a=4, b=4), jobs)
    records = by_name(result)
    assert all(sample.borrowed == 0 for sample in result.usage)
    assert max(sample.used for sample in result.usage) == 4
    assert records["job-3"].first_start == 100.0  # b's idle 4 GPUs were not lent
    assert records["job-4"].first_start is None  # more than its team's quota: never
    assert records["job-4"].reason is not None
    summary = summarize(result)
    assert summary["never_started"] == 1
    assert summary["gpu_hours_lost"] == 0.0


def test_cohort_lends_an_idle_teams_quota_and_the_owner_reclaims_it() -> None:
    # a borrows b's idle 4 GPUs; at t=100 b asks for them: a's job is preempted,
    # restarts from scratch when b's job ends, and its 100 s on 8 GPUs are lost.
    jobs = [job(2, "a", 0, 1000, 8), job(3, "b", 100, 50, 4)]
    result = replay(config("cohort", a=4, b=4), jobs)
    records = by_name(result)
    borrower, owner = records["job-2"], records["job-3"]
    assert borrower.first_start == 0.0
    assert owner.first_start == 100.0 and owner.wait == 0.0
    assert borrower.runs == 2
    assert borrower.lost_gpu_seconds == 800.0
    assert borrower.end == 150.0 + 1000.0
    assert borrower.wait == 50.0  # pending from its eviction to its restart
    assert [(s.at, s.used, s.borrowed) for s in result.usage] == [
        (0.0, 8, 4),
        (100.0, 4, 0),
        (150.0, 8, 4),
        (1150.0, 0, 0),
    ]
    summary = summarize(result)
    assert summary["gpu_hours_lost"] == pytest.approx(800 / 3600)
    assert summary["preempted_jobs"] == 1
    assert summary["run"]["preemptions"] == 1
    reclaim = summary["teams"]["b"]["reclaim"]
    assert (reclaim["needed_reclaim"], reclaim["never_granted"]) == (1, 0)
    assert reclaim["latency_s"]["max"] == 0.0
    assert summary["teams"]["a"]["reclaim"]["needed_reclaim"] == 0  # a asked past its quota


def test_cohort_fair_also_lends_and_reclaims() -> None:
    jobs = [job(2, "a", 0, 1000, 8), job(3, "b", 100, 50, 4)]
    records = by_name(replay(config("cohort-fair", a=4, b=4), jobs))
    assert records["job-2"].first_start == 0.0
    assert records["job-3"].first_start == 100.0
    assert records["job-2"].lost_gpu_seconds == 800.0


def test_a_reclaim_that_waits_is_measured_until_granted() -> None:
    # Static: nothing is lent, so an ask within nominal never needs a reclaim.
    jobs = [job(2, "a", 0, 1000, 8), job(3, "b", 100, 50, 4)]
    static = summarize(replay(config("static", a=8, b=4), jobs))
    assert static["reclaim"]["asked"] == 2
    assert static["reclaim"]["needed_reclaim"] == 0


def test_jobs_of_teams_without_a_queue_are_dropped_and_counted() -> None:
    jobs = [job(2, "a", 0, 10, 1), job(3, "ghost", 1, 10, 1), job(4, "ghost", 2, 10, 1)]
    result = replay(config("static", a=4), jobs)
    assert [r.name for r in result.jobs] == ["job-2"]
    assert result.dropped == {"ghost": 2}


def test_a_timeout_stops_the_replay_and_says_so() -> None:
    ticks = iter(range(100))
    jobs = [job(i, "a", i * 10, 5, 1) for i in range(2, 50)]
    result = replay(config("static", a=4), jobs, timeout=5, wall_clock=lambda: float(next(ticks)))
    assert result.truncated is not None and "timeout" in result.truncated
    assert 0 < len(result.jobs) < 48
    assert summarize(result)["truncated"] == result.truncated


# -- the fixture trace, end to end ----------------------------------------------------


@pytest.mark.parametrize("policy", ["static", "cohort", "cohort-fair"])
def test_the_fixture_trace_plays_under_each_policy(policy: str) -> None:
    sizes = parse_team_sizes((FIXTURES / "philly_vc_nodes.csv").read_text().splitlines())
    jobs = load_trace(FIXTURES / "philly_sample.csv")
    assert len(jobs) == 310
    cfg = parse_quota_config(quota_document(sizes, policy, 0.05))
    progress: list[int] = []
    result = replay(cfg, jobs, progress=progress.append)
    summary = summarize(result)
    assert summary["jobs"] == 310
    # every job either completed or never started (no timeout): nothing left mid-run
    assert summary["completed"] + summary["never_started"] == 310
    assert sum(progress) == 310 + summary["completed"]
    if policy == "static":
        assert summary["utilization"]["borrowed_mean_gpus"] == 0.0
        assert summary["gpu_hours_lost"] == 0.0
    else:
        assert summary["utilization"]["borrowed_mean_gpus"] > 0
    assert summary["utilization"]["mean"] <= 1.0
    json.dumps(summary)  # the summary is JSON as it is
    page = render_html(summary)
    assert page.count("<svg") == 2
    assert "<script" not in page and "src=" not in page and "href=" not in page
    assert "| " + policy in comparison_markdown([(policy, summary)])
