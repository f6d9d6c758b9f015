"""Fairness figures (issue 8): Jain's index, the checkpointer penalty, the hiding experiment."""

from __future__ import annotations

from typing import Any

import pytest
from sim_builders import OD, job, run

from lowcostgpu.core.policies import policy_by_name
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.sim.command import hiding_jobs, load_trace, simulate
from lowcostgpu.sim.fairness import fairness_figures, jain_index, never_checkpoint
from lowcostgpu.sim.workload import Workload


@pytest.mark.parametrize(
    ("values", "index"),
    [([], None), ([0.0, 0.0], 1.0), ([1.0, 1.0, 1.0], 1.0), ([1.0, 0.0, 0.0, 0.0], 0.25)],
)
def test_jains_index_is_one_when_equal_and_one_over_n_when_one_takes_all(
    values: list[float], index: float | None
) -> None:
    assert jain_index(values) == index


def test_the_fair_default_never_reinterrupts_inside_the_minimum_runtime_and_reports_fairness() -> (
    None
):
    mix = "synthetic:hours=24,per_hour=8,on_demand=0.35,mean_work_h=2"
    trace, catalog = load_trace(mix, None, None, seed=3)
    report, _ = simulate(trace, catalog, ["fair-least-work-lost", "least-work-lost"], seed=3)
    fair, plain = report["policies"]["fair-least-work-lost"], report["policies"]["least-work-lost"]
    assert fair["interruptions"] > 0
    assert fair["reinterrupted_within_min_runtime"] == 0
    for figures in (fair, plain):
        assert 0 < figures["jain_index_interruptions_per_running_hour"] <= 1
        experiment = figures["hiding_experiment"]
        assert experiment["hiding_jobs"] == len(hiding_jobs(trace, 3, 0.25)) > 0
        assert figures["hiding_gain"] == experiment["gain"]


def test_the_hiders_are_frequent_interruptible_checkpointers_only() -> None:
    trace, _ = load_trace("synthetic:hours=24,per_hour=8", None, None, seed=1)
    hidden = hiding_jobs(trace, 1, 0.5)
    jobs = {j.id: j for j in trace.jobs}
    assert hidden and all(
        jobs[h].capacity_class.preemptible and (jobs[h].checkpoint_interval_s or 10**9) <= 600
        for h in hidden
    )
    assert hiding_jobs(trace, 1, 0.0) == frozenset()
    assert SchedulerConfig().policy == policy_by_name()


def _workload(interval: int | None, cost: int, run_s: int, lost_s: int, waits: list[int]) -> Any:
    wl = Workload(job("j", 0, 10_000, interval=interval, cost=cost))
    wl.run_s, wl.lost_s = run_s, lost_s
    wl.interruptions = [100 * (i + 1) for i in range(len(waits))]
    wl.waits_after_interruption_s = waits
    return wl


@pytest.mark.parametrize(
    ("checkpointer", "never", "ratio"),
    [
        # Saves at the notice, restarts 120 s later; the never-saver redoes 1,800 s.
        ((600, 30, 3600, 0, [120]), (None, 0, 3600, 1800, [120]), 120 / 1920),
        # Same wait, nothing lost by either: checkpointing costs the same, not more.
        ((600, 30, 3600, 0, [300]), (None, 0, 3600, 0, [300]), 1.0),
        # Interrupted twice as often per hour with the same loss: costs twice as much.
        ((600, 30, 3600, 0, [60, 60]), (None, 0, 3600, 0, [60]), 2.0),
        # The never-savers' interruptions cost nothing: no ratio.
        ((600, 30, 3600, 0, [60]), (None, 0, 3600, 0, []), None),
    ],
)
def test_the_cost_ratio_weighs_what_each_interruption_cost_the_job(
    checkpointer: tuple[Any, ...], never: tuple[Any, ...], ratio: float | None
) -> None:
    figures = fairness_figures([_workload(*checkpointer), _workload(*never)], min_runtime_s=0)
    assert figures["checkpointer_cost_ratio"] == (None if ratio is None else round(ratio, 5))


def test_a_job_that_saves_only_at_a_notice_is_not_counted_as_never_checkpointing() -> None:
    notice_saver = _workload(None, 30, 3600, 0, [60])
    never_saver = _workload(None, 0, 3600, 0, [60])
    assert never_checkpoint([notice_saver, never_saver]) == [never_saver]


def test_the_wait_after_an_interruption_runs_from_the_notice_to_the_restart() -> None:
    # One GPU: the on-demand job at 1,000 s takes it for 500 s; the never-saver exits at once.
    result = run([job("ir", 0, 5_000), job("od", 1_000, 500, cls=OD)], host_gpus=(1,))
    wl = result.workloads["ir"]
    assert wl.interruptions == [1_000]
    assert wl.waits_after_interruption_s == [500]
