from __future__ import annotations

import math
from typing import Any

import pytest

from lowcostgpu.sdk.interval import IntervalPolicy, mtbi_from_fleet, young_daly_interval_s
from lowcostgpu.sdk.testing import ManualClock


@pytest.mark.parametrize(
    ("cost_s", "mtbi_s", "expected_s"),
    [
        (2.0, 3600.0, 120.0),
        (10.0, 7200.0, 379.4733192202055),
        (0.5, 100.0, 10.0),
        (0.0, 3600.0, 0.0),
    ],
)
def test_young_daly_is_sqrt_of_twice_cost_times_mtbi(
    cost_s: float, mtbi_s: float, expected_s: float
) -> None:
    assert young_daly_interval_s(cost_s, mtbi_s) == pytest.approx(expected_s)
    assert young_daly_interval_s(cost_s, mtbi_s) == pytest.approx(math.sqrt(2 * cost_s * mtbi_s))


@pytest.mark.parametrize(("cost_s", "mtbi_s"), [(-1.0, 10.0), (1.0, 0.0), (1.0, -5.0)])
def test_young_daly_refuses_nonsense(cost_s: float, mtbi_s: float) -> None:
    with pytest.raises(ValueError, match="mtbi_s"):
        young_daly_interval_s(cost_s, mtbi_s)


@pytest.mark.parametrize(
    ("fleet", "expected"),
    [
        (None, None),
        ({}, None),
        ({"interruptions_per_hour": 0.0, "median_time_between_interruptions_s": None}, None),
        ({"interruptions_per_hour": 2.0, "median_time_between_interruptions_s": None}, 1800.0),
        ({"interruptions_per_hour": 2.0, "median_time_between_interruptions_s": 900.0}, 900.0),
        ({"interruptions_per_hour": 2.0, "median_time_between_interruptions_s": 0}, 1800.0),
        ({"interruptions_per_hour": "many"}, None),
        ({"interruptions_per_hour": True}, None),
    ],
)
def test_mtbi_prefers_the_median_then_the_rate(
    fleet: dict[str, Any] | None, expected: float | None
) -> None:
    assert mtbi_from_fleet(fleet) == expected


@pytest.mark.parametrize(
    ("last_step", "step", "due"),
    [(0, 99, False), (0, 100, True), (0, 101, True), (4200, 4299, False), (4200, 4300, True)],
)
def test_every_steps_boundary(clock: ManualClock, last_step: int, step: int, due: bool) -> None:
    policy = IntervalPolicy(every_steps=100, clock=clock)
    policy.resume_from(last_step)
    assert policy.due(step) is due


@pytest.mark.parametrize(("elapsed_s", "due"), [(59.999, False), (60.0, True), (60.001, True)])
def test_every_seconds_boundary(clock: ManualClock, elapsed_s: float, due: bool) -> None:
    policy = IntervalPolicy(every_s=60.0, clock=clock)
    clock.advance(elapsed_s)
    assert policy.due(1) is due


def test_a_save_restarts_both_counters(clock: ManualClock) -> None:
    policy = IntervalPolicy(every_steps=10, every_s=60.0, clock=clock)
    clock.advance(61)
    assert policy.due(5)
    policy.record_save(5, cost_s=1.0)
    assert not policy.due(14)
    assert policy.due(15)


def fleet_policy(clock: ManualClock, fleet: dict[str, Any], **kwargs: Any) -> IntervalPolicy:
    return IntervalPolicy(adaptive=True, fleet_source=lambda: fleet, clock=clock, **kwargs)


@pytest.mark.parametrize(("elapsed_s", "due"), [(119.9, False), (120.0, True)])
def test_adaptive_uses_measured_cost_and_fleet_mtbi(
    clock: ManualClock, elapsed_s: float, due: bool
) -> None:
    policy = fleet_policy(clock, {"median_time_between_interruptions_s": 3600.0})
    policy.record_save(1, cost_s=2.0)  # sqrt(2 × 2 × 3600) = 120 s
    clock.advance(elapsed_s)
    assert policy.due(2) is due


@pytest.mark.parametrize(
    ("cost_s", "mtbi_s", "expected_s"),
    [(0.001, 60.0, 30.0), (100.0, 1e9, 3600.0), (2.0, 3600.0, 120.0)],
)
def test_adaptive_interval_stays_within_bounds(
    clock: ManualClock, cost_s: float, mtbi_s: float, expected_s: float
) -> None:
    policy = fleet_policy(clock, {"median_time_between_interruptions_s": mtbi_s})
    policy.record_save(1, cost_s=cost_s)
    assert policy.adaptive_interval_s() == pytest.approx(expected_s)


def test_adaptive_checkpoints_early_once_to_measure_the_cost(clock: ManualClock) -> None:
    policy = fleet_policy(clock, {"median_time_between_interruptions_s": 3600.0})
    assert policy.adaptive_interval_s() == policy.min_interval_s


def test_adaptive_without_fleet_interruptions_uses_every_s_or_the_max(clock: ManualClock) -> None:
    quiet = {"interruptions_per_hour": 0.0, "median_time_between_interruptions_s": None}
    with_user_interval = fleet_policy(clock, quiet, every_s=600.0)
    with_user_interval.record_save(1, cost_s=1.0)
    assert with_user_interval.adaptive_interval_s() == 600.0
    bare = fleet_policy(clock, quiet)
    bare.record_save(1, cost_s=1.0)
    assert bare.adaptive_interval_s() == bare.max_interval_s


def test_fleet_is_asked_at_most_every_refresh_period(clock: ManualClock) -> None:
    calls: list[float] = []

    def source() -> dict[str, Any]:
        calls.append(clock.now)
        return {"median_time_between_interruptions_s": 3600.0}

    policy = IntervalPolicy(adaptive=True, fleet_source=source, clock=clock)
    policy.record_save(1, cost_s=1.0)
    for _ in range(50):
        policy.due(2)
        clock.advance(10)  # 500 s in all
    assert len(calls) == 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"every_steps": 0},
        {"every_s": -1.0},
        {"min_interval_s": 10.0, "max_interval_s": 5.0},
        {"min_interval_s": 0.0},
    ],
)
def test_bad_settings_are_refused(clock: ManualClock, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        IntervalPolicy(clock=clock, **kwargs)
