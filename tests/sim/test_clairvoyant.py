"""The clairvoyant yardstick: the true loss of a notice, and victims chosen by it."""

from __future__ import annotations

import pytest
from sim_builders import OD, job, run

from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.core.fairness import FAIR_LEAST_WORK_LOST
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.victim_policy import LEAST_WORK_LOST
from lowcostgpu.domain.capacity import Allocation, CapacityClass, PoolKey
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.sim.clairvoyant import Clairvoyant, reference_policy
from lowcostgpu.sim.jobs import Job
from lowcostgpu.sim.metrics import summarise
from lowcostgpu.sim.workload import Workload

GRACE_S = 300


@pytest.mark.parametrize(
    ("the_job", "started_at", "now", "lost_s"),
    [
        # Never saves: a notice loses the whole run.
        (job("never", 0, 10_000), 5, 105, 100),
        # Saves every 100 s in 10 s, inside the grace: it saves again at the notice.
        (job("quick", 0, 10_000, interval=100, cost=10), 0, 150, 0),
        # A save that takes exactly the grace still fits ...
        (job("fits", 0, 10_000, interval=100, cost=GRACE_S), 0, 1200, 0),
        # ... one second more does not: killed at the deadline, it keeps its last periodic save
        # (at 1200: two cycles of 401 s have saved 200; the third did 100 s of work, unsaved).
        (job("too-slow", 0, 10_000, interval=100, cost=GRACE_S + 1), 0, 1200, 100),
    ],
)
def test_the_true_loss_of_a_notice_follows_what_the_workload_does_at_sigterm(
    the_job: Job, started_at: int, now: int, lost_s: int
) -> None:
    wl = Workload(the_job)
    wl.start(f"{the_job.id}@{started_at}", started_at)
    assert wl.lost_if_noticed_s(now, GRACE_S) == lost_s


def test_the_true_loss_is_what_the_interruption_then_records() -> None:
    wl = Workload(job("slow", 0, 10_000, interval=100, cost=GRACE_S + 1))
    wl.start("slow@0", 0)
    expected = wl.lost_if_noticed_s(1200, GRACE_S)
    assert wl.notice(1200, GRACE_S) is None  # killed at the deadline
    assert wl.lost_if_noticed_s(1300, GRACE_S) == 0  # already noticed: nothing more to lose
    wl.end_run(1500)
    assert wl.lost_s == expected


def test_a_workload_not_running_loses_nothing() -> None:
    assert Workload(job("idle", 0, 100)).lost_if_noticed_s(50, GRACE_S) == 0


def _victims(policy_name: str) -> tuple[int, int]:
    """A never-saver started at 100 and a job that saves at the notice (but has reported no
    checkpoint yet: its interval is longer than its run so far) started at 0 share a host; an
    on-demand request for one GPU comes at 900. Returns (their interruptions)."""
    policy = reference_policy(policy_name) if policy_name.startswith("clair") else LEAST_WORK_LOST
    assert policy is not None
    jobs = [
        job("saver", 0, 5000, interval=2000, cost=10),
        job("never", 100, 5000),
        job("od", 900, 100, cls=OD),
    ]
    result = run(jobs, config=SchedulerConfig(policy=policy))
    saver, never = result.workloads["saver"], result.workloads["never"]
    return len(saver.interruptions), len(never.interruptions)


@pytest.mark.parametrize(
    ("policy_name", "saver", "never"),
    [
        # Least work lost sees 900 s at risk on the saver and 800 on the never-saver.
        ("least-work-lost", 0, 1),
        # The yardstick knows the saver will save at the notice and lose nothing.
        ("clairvoyant", 1, 0),
        ("clairvoyant-fair", 1, 0),
    ],
)
def test_the_yardstick_reclaims_the_job_that_truly_loses_least(
    policy_name: str, saver: int, never: int
) -> None:
    assert _victims(policy_name) == (saver, never)


def test_each_reclaim_is_measured_against_the_clairvoyant_choice_at_that_moment() -> None:
    jobs = [
        job("saver", 0, 5000, interval=2000, cost=10),
        job("never", 100, 5000),
        job("od", 900, 100, cls=OD),
    ]
    result = run(jobs, config=SchedulerConfig(policy=LEAST_WORK_LOST))
    # Least work lost reclaims the never-saver (800 s lost); the clairvoyant would have taken
    # the saver, which loses nothing: all of it was avoidable.
    assert result.reclaims.pairs == [(800, 0)]
    figures = summarise(result, load_catalog())
    assert figures["lost_gpu_hours_at_reclaims"] == figures["lost_gpu_hours"] == 0.222
    assert figures["clairvoyant_lost_gpu_hours_at_the_same_reclaims"] == 0
    assert figures["avoidable_lost_share"] == 1.0


def test_a_reclaim_with_no_choice_is_unavoidable_loss() -> None:
    # One never-saver fills the host: the on-demand request can only take it.
    result = run([job("never", 0, 5000, gpus=2), job("od", 900, 100, gpus=2, cls=OD)])
    assert result.reclaims.pairs == [(1800, 1800)]
    assert summarise(result, load_catalog())["avoidable_lost_share"] == 0


def _alloc(**changes: object) -> Allocation:
    base: dict[str, object] = {
        "id": "i@0",
        "subject_id": "i",
        "host_id": "h",
        "pool": PoolKey("eu", "a100"),
        "gpu_indices": frozenset({0, 1}),
        "capacity_class": CapacityClass.INTERRUPTIBLE,
        "started_at": 1000,
    }
    return Allocation(**{**base, **changes})  # type: ignore[arg-type]


def test_the_fair_yardstick_keeps_the_fairness_terms_and_the_shield() -> None:
    restarted = _alloc(interruption_count=1, last_interrupted_at=990)
    fair = Clairvoyant(fair=FAIR_LEAST_WORK_LOST).bound(lambda subject, now: 7)
    plain = Clairvoyant().bound(lambda subject, now: 7)
    parts = FAIR_LEAST_WORK_LOST.parts(restarted, 1100)
    assert plain.cost(restarted, 1100) == 2 * 7
    # The terms as the policy adds them (the band caps them at 120 GPU-s per GPU here).
    terms = min(parts.requeue_gpu_s + parts.history_gpu_s, 2 * FAIR_LEAST_WORK_LOST.band_slack_s)
    assert fair.cost(restarted, 1100) == 2 * 7 + terms
    assert fair.shields(restarted, 1100, 300) and not fair.shields(restarted, 1300, 300)
    assert not plain.shields(restarted, 1100, 300)


def test_an_unbound_yardstick_says_it_only_runs_in_the_simulator() -> None:
    with pytest.raises(InvalidRequest, match="only runs in the simulator"):
        Clairvoyant().cost(_alloc(), 2000)
