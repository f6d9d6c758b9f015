"""Fairness figures (issue 8): Jain's index, the checkpointer penalty, the hiding experiment."""

from __future__ import annotations

import pytest

from lowcostgpu.core.policies import policy_by_name
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.sim.command import hiding_jobs, load_trace, simulate
from lowcostgpu.sim.fairness import jain_index


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
