"""The stress trace (`sim/stress.py`): its options, its fleet, its loads and daily curve, its
durations and habits, and that the same seed gives the same trace."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest

from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.errors import ConfigError, InvalidRequest
from lowcostgpu.sim.command import load_trace, simulate
from lowcostgpu.sim.jobs import Trace
from lowcostgpu.sim.stress import (
    HOURLY_ARRIVALS,
    Stress,
    generate_stress,
    mean_hours,
    parse_stress,
    stress_hosts,
)

# A week on 300 GPUs with sigma 1 (thousands of jobs, few huge ones): the loads and the daily
# curve come out within a few per cent of what was asked.
STEADY = Stress(gpus=300, days=7, sigma=1.0)


@pytest.fixture(scope="module")
def steady() -> Trace:
    return generate_stress(STEADY, seed=3)


def _offered_share(trace: Trace, klass: CapacityClass) -> float:
    """GPU-hours submitted after the warm start, of one class, ÷ the capacity's GPU-hours."""
    assert trace.horizon_s is not None
    capacity = sum(h.gpu_count for h in trace.hosts) * trace.horizon_s
    work = sum(j.gpus * j.work_s for j in trace.jobs if j.capacity_class is klass and j.submit_s)
    return work / capacity


def _arrivals_in_hour(trace: Trace, klass: CapacityClass, hour: int) -> int:
    return sum(
        1
        for j in trace.jobs
        if j.capacity_class is klass and j.submit_s and j.submit_s % 86400 // 3600 == hour
    )


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("stress", Stress()),
        ("stress:", Stress()),
        ("stress:gpus=300", Stress(gpus=300)),
        ("stress: gpus = 300 , days=2", Stress(gpus=300, days=2)),
        (
            "stress:on_demand=0.5,peak=0.6,interruptible=0.4,median_h=2,sigma=1,max_h=48",
            Stress(on_demand=0.5, peak=0.6, interruptible=0.4, median_h=2, sigma=1, max_h=48),
        ),
        ("stress:on_demand=0,interruptible=0.5", Stress(on_demand=0, interruptible=0.5)),
        ("stress:on_demand=0.7,peak=0.7", Stress(on_demand=0.7, peak=0.7)),  # a flat day
        ("stress:sigma=0", Stress(sigma=0)),
    ],
)
def test_options_are_parsed_into_the_stress_settings(spec: str, expected: Stress) -> None:
    assert parse_stress(spec) == expected


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("stress:gpu=300", "option 'gpu=300' is not understood"),
        ("stress:gpus", "option 'gpus' is not understood"),
        ("stress:gpus=1.5", "gpus must be a whole number, got '1.5'"),
        ("stress:days=two", "days must be a number, got 'two'"),
        ("stress:days=inf", "days must be a finite number"),
        ("stress:gpus=19", "gpus must be ≥ 20"),
        ("stress:days=0", "days must be > 0"),
        ("stress:median_h=-1", "median_h must be > 0"),
        ("stress:sigma=-0.1", "sigma must be ≥ 0"),
        ("stress:interruptible=-0.1", "shares of the capacity, ≥ 0"),
        ("stress:on_demand=0,interruptible=0", "cannot both be 0"),
        ("stress:peak=0.65", "cannot be below the mean, on_demand (0.66)"),
        ("stress:peak=1.2", "would need a negative arrival rate"),
        ("stress:median_h=10,max_h=5", "max_h (5.0) is below median_h (10.0)"),
        ("stress:gpus=300,gpus=400", "gpus is given twice"),
    ],
)
def test_a_bad_option_is_refused_saying_what_is_wrong(spec: str, says: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_stress(spec)
    assert says in info.value.message


def test_the_peak_just_below_the_limit_is_accepted_and_just_above_refused() -> None:
    parse_stress("stress:peak=1.19")
    with pytest.raises(InvalidRequest, match="negative arrival rate") as info:
        parse_stress("stress:peak=1.20")
    assert info.value.hint == "give peak ≤ 1.195 for on_demand=0.66"


def test_the_same_seed_gives_the_same_trace_and_another_seed_another() -> None:
    options = Stress(gpus=60, days=1)
    assert generate_stress(options, seed=5) == generate_stress(options, seed=5)
    assert generate_stress(options, seed=5).jobs != generate_stress(options, seed=6).jobs


def test_the_default_fleet_is_10000_gpus_mostly_on_one_gpu_hosts() -> None:
    hosts = stress_hosts(10_000)
    assert sum(h.gpu_count for h in hosts) == 10_000
    assert len(hosts) == 4_125
    assert sum(h.gpu_count == 1 for h in hosts) / len(hosts) == pytest.approx(0.679, abs=0.001)
    assert {h.gpu_count for h in hosts} == {1, 4, 8}
    assert {h.pool.gpu_type for h in hosts} == {"h100-sxm", "a100-sxm4", "rtx-4090"}
    assert len({h.id for h in hosts}) == len(hosts)


@pytest.mark.parametrize("gpus", [20, 300, 500])
def test_a_small_fleet_keeps_about_the_gpus_asked_in_every_pool(gpus: int) -> None:
    hosts = stress_hosts(gpus)
    assert abs(sum(h.gpu_count for h in hosts) - gpus) <= max(4, gpus * 0.03)
    assert len({h.pool for h in hosts}) == 3
    assert sum(h.gpu_count == 1 for h in hosts) > len(hosts) / 2


@pytest.mark.parametrize(
    ("klass", "share", "tolerance"),
    [(CapacityClass.ON_DEMAND, 0.66, 0.08), (CapacityClass.INTERRUPTIBLE, 0.32, 0.10)],
)
def test_each_class_offers_about_the_share_of_capacity_asked(
    steady: Trace, klass: CapacityClass, share: float, tolerance: float
) -> None:
    assert _offered_share(steady, klass) == pytest.approx(share, rel=tolerance)


def test_on_demand_arrivals_follow_the_daily_curve_and_interruptible_ones_are_steady(
    steady: Trace,
) -> None:
    peak, trough = HOURLY_ARRIVALS.index(max(HOURLY_ARRIVALS)), 13
    on_demand = [_arrivals_in_hour(steady, CapacityClass.ON_DEMAND, h) for h in (peak, trough)]
    interruptible = [
        _arrivals_in_hour(steady, CapacityClass.INTERRUPTIBLE, h) for h in (peak, trough)
    ]
    assert on_demand[0] > 2.5 * on_demand[1]  # the curve's ratio is 1.44 / 0.46 = 3.1
    assert 0.75 < interruptible[0] / interruptible[1] < 1.33


def test_a_peak_equal_to_the_mean_gives_a_flat_day() -> None:
    trace = generate_stress(Stress(gpus=300, days=7, sigma=1, peak=0.66), seed=1)
    busy, quiet = (_arrivals_in_hour(trace, CapacityClass.ON_DEMAND, h) for h in (18, 13))
    assert 0.8 < busy / quiet < 1.25


@pytest.mark.parametrize("median_h", [0.5, 2.0])
def test_durations_have_the_median_asked(median_h: float) -> None:
    trace = generate_stress(Stress(gpus=200, days=14, median_h=median_h), seed=2)
    fresh = [j.work_s / 3600 for j in trace.jobs if j.submit_s]
    assert len(fresh) > 4_000  # the sample median's error: ~2.4 / √n in log space, 3.5 %
    assert statistics.median(fresh) == pytest.approx(median_h, rel=0.12)
    assert max(fresh) <= 168  # the cut


@pytest.mark.parametrize(("median_h", "sigma", "max_h"), [(1, 1.9, 168), (0.5, 1, 4), (2, 0, 1)])
def test_the_mean_duration_behind_the_arrival_rates_is_the_cut_lognormals(
    median_h: float, sigma: float, max_h: float
) -> None:
    rng = random.Random(0)
    sample = [min(max_h, rng.lognormvariate(0, sigma) * median_h) for _ in range(200_000)]
    assert mean_hours(median_h, sigma, max_h) == pytest.approx(statistics.fmean(sample), rel=0.03)


def test_jobs_are_mostly_one_gpu_and_fit_a_host_of_their_pool(steady: Trace) -> None:
    largest = {h.pool: h.gpu_count for h in sorted(steady.hosts, key=lambda h: h.gpu_count)}
    assert all(j.gpus in (1, 4, 8) and j.gpus <= largest[j.pool] for j in steady.jobs)
    assert sum(j.gpus == 1 for j in steady.jobs) / len(steady.jobs) > 0.8


def test_interruptible_jobs_have_every_habit_including_saving_only_at_a_notice(
    steady: Trace,
) -> None:
    interruptible = [j for j in steady.jobs if j.capacity_class.preemptible]
    habits = [(j.checkpoint_interval_s, j.checkpoint_cost_s) for j in interruptible]
    shares = {h: habits.count(h) / len(habits) for h in set(habits)}
    assert set(shares) == {(600, 30), (3600, 400), (None, 60), (None, 0)}
    assert shares[(None, 60)] == pytest.approx(0.15, abs=0.03)  # saves only at a notice
    on_demand = [j for j in steady.jobs if not j.capacity_class.preemptible]
    assert all(j.checkpoint_interval_s is None and j.checkpoint_cost_s == 0 for j in on_demand)


def test_the_trace_starts_warm_with_on_demand_jobs_first(steady: Trace) -> None:
    warm = [j for j in steady.jobs if j.submit_s == 0]
    assert len(warm) > 50
    classes = [j.capacity_class for j in warm]
    first_interruptible = classes.index(CapacityClass.INTERRUPTIBLE)
    assert CapacityClass.ON_DEMAND not in classes[first_interruptible:]


def test_the_stress_trace_brings_its_fleet_so_fleet_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="brings its own fleet: --fleet cannot be used"):
        load_trace("stress:gpus=50", tmp_path / "fleet.toml", None)


@pytest.mark.parametrize(("scale", "gpus"), [(1.0, 400), (0.5, 200), (0.25, 100)])
def test_fleet_scale_keeps_that_share_of_the_gpus(scale: float, gpus: int) -> None:
    trace, _ = load_trace("stress:gpus=400,days=0.1", None, None, fleet_scale=scale)
    assert abs(sum(h.gpu_count for h in trace.hosts) - gpus) <= 4


@pytest.mark.parametrize(
    ("scale", "says"),
    [(0.0, "must be in (0, 1]"), (1.5, "must be in (0, 1]"), (0.01, "it needs at least 20")],
)
def test_a_bad_fleet_scale_is_refused(scale: float, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_trace("stress:gpus=400,days=0.1", None, None, fleet_scale=scale)
    assert says in info.value.message


def test_a_catalog_without_the_stress_gpu_types_is_refused(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(
        '[storage]\nper_gb_month = "0.10"\n\n[gpu.h100-sxm]\ndisplay_name = "H100"\n'
        'memory_gb = 80\non_demand_per_gpu_hour = "1.0"\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="a100-sxm4, rtx-4090 are not in the catalog"):
        load_trace("stress:gpus=50", None, catalog)


def test_a_small_stress_trace_runs_through_the_engine() -> None:
    trace, catalog = load_trace("stress:gpus=40,days=0.25", None, None, seed=1)
    report, _ = simulate(trace, catalog, ["least-work-lost"], seed=1, hiding_share=0)
    assert report["fleet"]["gpus"] == sum(h.gpu_count for h in trace.hosts)
    assert report["trace"]["format"] == "stress"
    jobs = report["policies"]["least-work-lost"]["jobs"]
    assert jobs["on_demand"] + jobs["interruptible"] == len(trace.jobs)
    assert jobs["on_demand_done"] + jobs["interruptible_done"] > 0
