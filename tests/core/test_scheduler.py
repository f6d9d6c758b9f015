"""On-demand placement and victim choice."""

from __future__ import annotations

import copy

import pytest
from fleet_builders import POOL, alloc, host, on_demand

from lowcostgpu.core.scheduler import SchedulerConfig, place_on_demand
from lowcostgpu.core.snapshot import FleetSnapshot, apply_plan, release
from lowcostgpu.core.victim_policy import LEAST_WORK_LOST
from lowcostgpu.domain.capacity import PoolKey
from lowcostgpu.domain.errors import InsufficientCapacity, InvalidRequest, NotFound

# These tests encode the plain least-work-lost rule; the default policy has its own tests
# (tests/core/test_fairness.py).
NO_PROTECTION = SchedulerConfig(min_runtime_s=0, policy=LEAST_WORK_LOST)
PROTECTION = SchedulerConfig(min_runtime_s=300, policy=LEAST_WORK_LOST)


def test_fits_on_free_gpus_with_best_fit_keeping_whole_hosts_free() -> None:
    snap = FleetSnapshot.build(
        [host("h1"), host("h2")], [alloc("x", "h2", range(6), preemptible=False)]
    )
    plan = place_on_demand(snap, on_demand("od", 2), 100, NO_PROTECTION)
    (placement,) = plan.placements
    assert placement.host_id == "h2"
    assert placement.gpu_indices == frozenset({6, 7})
    assert plan.preemptions == ()


@pytest.mark.parametrize(
    ("checkpoints", "expected_victim"),
    [
        ({"a": 90, "b": 50}, "a"),  # a loses 10 GPU-s, b 50
        ({"a": 50, "b": 90}, "b"),
        ({"a": None, "b": 10}, "b"),  # a never checkpointed: it loses its whole run
    ],
)
def test_reclaims_the_victim_that_loses_least_work(
    checkpoints: dict[str, int | None], expected_victim: str
) -> None:
    snap = FleetSnapshot.build(
        [host("h1", 2)],
        [
            alloc("a", "h1", {0}, checkpoint_at=checkpoints["a"]),
            alloc("b", "h1", {1}, checkpoint_at=checkpoints["b"]),
        ],
    )
    plan = place_on_demand(snap, on_demand("od"), 100, NO_PROTECTION)
    assert [p.subject_id for p in plan.preemptions] == [expected_victim]
    assert plan.placements[0].waits_for == {f"{expected_victim}@0"}


def test_prefers_fewest_victims_when_work_lost_is_equal() -> None:
    snap = FleetSnapshot.build(
        [host("h1", 2), host("h2", 2)],
        [
            alloc("a", "h1", {0}, checkpoint_at=100),
            alloc("b", "h1", {1}, checkpoint_at=100),
            alloc("c", "h2", {0, 1}, checkpoint_at=100),
        ],
    )
    plan = place_on_demand(snap, on_demand("od", 2), 100, NO_PROTECTION)
    assert [p.subject_id for p in plan.preemptions] == ["c"]


def test_prefers_the_least_recently_interrupted_of_equal_victims() -> None:
    snap = FleetSnapshot.build(
        [host("h1", 2)],
        [
            alloc("a", "h1", {0}, checkpoint_at=100, interrupted_at=50),
            alloc("b", "h1", {1}, checkpoint_at=100, interrupted_at=10),
        ],
    )
    plan = place_on_demand(snap, on_demand("od"), 100, NO_PROTECTION)
    assert [p.subject_id for p in plan.preemptions] == ["b"]


def test_ties_are_broken_by_id() -> None:
    snap = FleetSnapshot.build(
        [host("h1", 2)],
        [alloc("b", "h1", {0}, checkpoint_at=100), alloc("a", "h1", {1}, checkpoint_at=100)],
    )
    plan = place_on_demand(snap, on_demand("od"), 100, NO_PROTECTION)
    assert [p.subject_id for p in plan.preemptions] == ["a"]


def test_multi_gpu_request_picks_the_host_whose_victims_cost_least() -> None:
    snap = FleetSnapshot.build(
        [host("h1", 4), host("h2", 4)],
        [
            alloc("a", "h1", {0, 1, 2, 3}, checkpoint_at=0),
            alloc("b", "h2", {0, 1}, checkpoint_at=90),
            alloc("c", "h2", {2, 3}, checkpoint_at=95),
        ],
    )
    plan = place_on_demand(snap, on_demand("od", 4), 100, NO_PROTECTION)
    assert sorted(p.subject_id for p in plan.preemptions) == ["b", "c"]
    assert plan.placements[0].host_id == "h2"


def test_on_demand_work_is_never_reclaimed() -> None:
    snap = FleetSnapshot.build([host("h1", 2)], [alloc("x", "h1", {0, 1}, preemptible=False)])
    with pytest.raises(InsufficientCapacity) as err:
        place_on_demand(snap, on_demand("od"), 100, NO_PROTECTION)
    assert err.value.details["free_gpus"] == 0
    assert "launch as interruptible" in str(err.value)


@pytest.mark.parametrize(
    ("runtime_s", "victim"),
    [
        (299, "old"),  # the fresh one is still protected: the old one goes though it loses more
        (300, "fresh"),  # exactly at the minimum runtime it is fair game again, and loses less
    ],
)
def test_minimum_runtime_protects_fresh_starts(runtime_s: int, victim: str) -> None:
    now = 1000
    snap = FleetSnapshot.build(
        [host("h1", 2)],
        [
            alloc("old", "h1", {0}, started_at=0, checkpoint_at=None),
            alloc("fresh", "h1", {1}, started_at=now - runtime_s),
        ],
    )
    plan = place_on_demand(snap, on_demand("od"), now, PROTECTION)
    assert [p.subject_id for p in plan.preemptions] == [victim]


def test_protected_work_is_taken_only_when_there_is_no_other_way() -> None:
    snap = FleetSnapshot.build([host("h1", 1)], [alloc("fresh", "h1", {0}, started_at=990)])
    plan = place_on_demand(snap, on_demand("od"), 1000, PROTECTION)
    assert [p.subject_id for p in plan.preemptions] == ["fresh"]
    assert "minimum runtime" in plan.preemptions[0].reason


def test_preemption_explains_the_choice_and_the_alternatives() -> None:
    snap = FleetSnapshot.build(
        [host("h1", 1), host("h2", 1)],
        [alloc("a", "h1", {0}, checkpoint_at=90), alloc("b", "h2", {0}, checkpoint_at=10)],
    )
    (pre,) = place_on_demand(snap, on_demand("od"), 100, NO_PROTECTION).preemptions
    assert pre.lost_gpu_s == 10
    assert "every other host would lose at least 90 GPU-s" in pre.reason


def test_draining_allocations_are_not_chosen_twice() -> None:
    snap = FleetSnapshot.build([host("h1", 2)], [alloc("a", "h1", {0}), alloc("b", "h1", {1})])
    first = place_on_demand(snap, on_demand("od1"), 100, NO_PROTECTION)
    snap = apply_plan(snap, first, 100)
    second = place_on_demand(snap, on_demand("od2"), 100, NO_PROTECTION)
    assert {p.subject_id for p in first.preemptions}.isdisjoint(
        p.subject_id for p in second.preemptions
    )
    with pytest.raises(InsufficientCapacity):
        place_on_demand(apply_plan(snap, second, 100), on_demand("od3"), 100, NO_PROTECTION)


def test_waiting_placement_starts_once_its_victims_are_released() -> None:
    snap = FleetSnapshot.build([host("h1", 1)], [alloc("a", "h1", {0})])
    snap = apply_plan(snap, place_on_demand(snap, on_demand("od"), 100, NO_PROTECTION), 100)
    od = next(a for a in snap.allocations() if a.subject_id == "od")
    assert od.waits_for == {"a@0"}
    snap = release(snap, "a@0", "h1")
    (od,) = list(snap.allocations())
    assert od.waits_for == frozenset()


@pytest.mark.parametrize(
    ("pool", "gpus", "error"),
    [
        (PoolKey("mars", "a100-sxm4"), 1, NotFound),
        (POOL, 9, InvalidRequest),
        (POOL, 0, InvalidRequest),
    ],
)
def test_impossible_requests_get_a_clear_error(
    pool: PoolKey, gpus: int, error: type[Exception]
) -> None:
    snap = FleetSnapshot.build([host("h1")])
    with pytest.raises(error):
        place_on_demand(snap, on_demand("od", gpus, pool=pool), 0, NO_PROTECTION)


def test_planning_never_mutates_its_input() -> None:
    snap = FleetSnapshot.build(
        [host("h1", 2)], [alloc("a", "h1", {0}), alloc("b", "h1", {1}, checkpoint_at=5)]
    )
    before = copy.deepcopy(snap)
    place_on_demand(snap, on_demand("od"), 100, NO_PROTECTION)
    assert snap == before
