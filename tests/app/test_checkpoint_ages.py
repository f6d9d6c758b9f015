"""The shell learns the fleet's typical checkpoint age for the fairness policy from reports."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plane_world import POOL, World

from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.core.checkpoint_ages import CheckpointAges
from lowcostgpu.core.fairness import FairLeastWorkLost, typical_checkpoint_age_s
from lowcostgpu.core.lifecycle import InstanceState
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.victim_policy import LEAST_WORK_LOST
from lowcostgpu.domain.capacity import CapacityClass

RUNNING = InstanceState(
    "i", "acme", POOL, 1, CapacityClass.INTERRUPTIBLE, allocation_id="i@0", last_checkpoint_at=100
)


@pytest.mark.parametrize(
    ("after", "learnt"),
    [
        (replace(RUNNING, last_checkpoint_at=700), [600]),  # the same run: an interval
        (replace(RUNNING, allocation_id="i@650.1", last_checkpoint_at=700), []),  # a new run
        (replace(RUNNING, last_checkpoint_at=100), []),  # the same second again: nothing
    ],
)
def test_an_interval_is_the_time_between_two_saves_of_one_run(
    after: InstanceState, learnt: list[int]
) -> None:
    ages = CheckpointAges()
    ages.learn(RUNNING, after)
    assert list(ages.intervals_s) == learnt


def test_the_first_save_of_a_run_measures_nothing() -> None:
    ages = CheckpointAges()
    ages.learn(replace(RUNNING, last_checkpoint_at=None), RUNNING)
    assert list(ages.intervals_s) == []


def test_only_the_fairness_policy_is_given_the_learnt_age() -> None:
    ages = CheckpointAges()
    fair = SchedulerConfig(policy=FairLeastWorkLost())
    assert ages.applied(fair) is fair  # nothing learnt yet: the policy's default stands
    for interval in (600, 620, 5000):
        ages.learn(RUNNING, replace(RUNNING, last_checkpoint_at=100 + interval))
    learnt = ages.applied(fair).policy
    assert isinstance(learnt, FairLeastWorkLost) and learnt.typical_checkpoint_age_s == 310
    plain = SchedulerConfig(policy=LEAST_WORK_LOST)
    assert ages.applied(plain) is plain


def test_the_plane_learns_from_the_checkpoints_instances_report() -> None:
    w = World()
    w.wired.plane.config = replace(
        w.plane.config, scheduler=replace(w.plane.config.scheduler, policy=FairLeastWorkLost())
    )
    i = w.plane.launch(
        LaunchRequest("acme", "a100-sxm4", "interruptible", 1, command=("train",))
    ).state.id
    w.tick()
    w.tick(1)
    for _ in range(3):
        w.clock.advance(120)
        w.plane.report_checkpoint(i, 1)
    policy = w.plane.config.scheduler.policy
    assert isinstance(policy, FairLeastWorkLost)
    assert policy.typical_checkpoint_age_s == 60  # half the median interval of 120 s


@settings(max_examples=200, deadline=None)
@given(
    window=st.integers(min_value=1, max_value=7),
    intervals=st.lists(st.integers(min_value=1, max_value=50), max_size=40),
)
def test_the_learnt_age_is_half_the_median_of_the_window_as_it_slides(
    window: int, intervals: list[int]
) -> None:
    """The sorted copy the learner keeps (so that it never sorts at a report) gives, after
    every interval, the figure a sort of the window as it then stands would give."""
    ages = CheckpointAges(window)
    fair = SchedulerConfig(policy=FairLeastWorkLost(typical_checkpoint_age_s=10**6))
    seen: list[int] = []
    for interval in intervals:
        ages.learn(RUNNING, replace(RUNNING, last_checkpoint_at=100 + interval))
        seen.append(interval)
        policy = ages.applied(fair).policy
        assert isinstance(policy, FairLeastWorkLost)
        assert list(ages.intervals_s) == seen[-window:]
        assert policy.typical_checkpoint_age_s == typical_checkpoint_age_s(seen[-window:])
