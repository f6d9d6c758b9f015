"""The peers' victim policies: each picks what its rule says, and the search finds its best set."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fleet_builders import alloc, feasible_victim_sets, host, on_demand
from hypothesis import given, settings
from hypothesis import strategies as st

from lowcostgpu.core.host_victims import NEVER, is_protected
from lowcostgpu.core.policies import (
    POLICY_NAMES,
    LowestPriority,
    SeededRandom,
    YoungestFirst,
    policy_by_name,
    seeded_draw,
)
from lowcostgpu.core.scheduler import SchedulerConfig, place_on_demand
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.core.victim_policy import LEAST_WORK_LOST, VictimPolicy
from lowcostgpu.domain.capacity import Allocation
from lowcostgpu.domain.errors import InsufficientCapacity, InvalidRequest


def _victims(snap: FleetSnapshot, policy: VictimPolicy, now: int, gpus: int = 1) -> list[str]:
    config = SchedulerConfig(min_runtime_s=0, policy=policy)
    plan = place_on_demand(snap, on_demand("od", gpus), now, config)
    return [p.subject_id for p in plan.preemptions]


def test_youngest_first_reclaims_the_latest_start_whatever_its_checkpoints() -> None:
    snap = FleetSnapshot.build(
        [host("h1", 2), host("h2", 1)],
        [
            alloc("old", "h1", {0}, started_at=0, checkpoint_at=999),  # loses nothing
            alloc("young", "h1", {1}, started_at=900),  # never checkpointed
            alloc("middle", "h2", {0}, started_at=500),
        ],
    )
    assert _victims(snap, YoungestFirst(), 1000) == ["young"]
    assert _victims(snap, LEAST_WORK_LOST, 1000) == ["old"]


def test_lowest_priority_goes_first_whatever_the_draw() -> None:
    low = replace(alloc("low", "h1", {0}), priority=-5)
    high = replace(alloc("high", "h1", {1}), priority=3)
    snap = FleetSnapshot.build([host("h1", 2)], [high, low])
    for seed in range(20):
        assert _victims(snap, LowestPriority(seed), 100) == ["low"]


@pytest.mark.parametrize("policy_name", ["lowest-priority", "random"])
def test_seeded_policies_repeat_with_a_seed_and_vary_across_seeds(policy_name: str) -> None:
    allocations = [alloc(f"a{i}", "h1", {i}) for i in range(8)]
    snap = FleetSnapshot.build([host("h1", 8)], allocations)
    chosen = {seed: _victims(snap, policy_by_name(policy_name, seed), 100) for seed in range(30)}
    again = {seed: _victims(snap, policy_by_name(policy_name, seed), 100) for seed in range(30)}
    assert chosen == again
    assert len({tuple(v) for v in chosen.values()}) > 3  # not always the same victim


def test_the_draw_depends_on_seed_and_allocation_only() -> None:
    assert seeded_draw(7, "a@0") == seeded_draw(7, "a@0")
    assert seeded_draw(7, "a@0") != seeded_draw(8, "a@0")
    assert seeded_draw(7, "a@0") != seeded_draw(7, "a@60")  # a restart draws anew
    assert 0 <= seeded_draw(1, "x") < 2**32


def test_the_preempted_reason_names_the_policy() -> None:
    snap = FleetSnapshot.build([host("h1", 1)], [alloc("a", "h1", {0}, started_at=40)])
    config = SchedulerConfig(min_runtime_s=0, policy=YoungestFirst())
    plan = place_on_demand(snap, on_demand("od"), 100, config)
    assert plan.preemptions[0].reason.startswith("chosen by youngest-first: a on h1 loses 60 s")


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_name_gives_its_policy(name: str) -> None:
    assert policy_by_name(name, 3).name == name


def test_an_unknown_policy_name_lists_the_known_ones() -> None:
    with pytest.raises(InvalidRequest) as info:
        policy_by_name("oldest-first")
    assert "least-work-lost" in str(info.value.hint)


def _brute_force(
    snap: FleetSnapshot, gpus: int, now: int, min_runtime_s: int, policy: VictimPolicy
) -> tuple[object, ...] | None:
    best: tuple[object, ...] | None = None
    for _, subset in feasible_victim_sets(snap, gpus):
        key = (
            sum(is_protected(a, now, min_runtime_s) for a in subset),
            sum(policy.cost(a, now) for a in subset),
            len(subset),
            max((a.last_interrupted_at or NEVER for a in subset), default=NEVER),
        )
        if best is None or key < best:
            best = key
    return best


@st.composite
def _fleets(draw: st.DrawFn) -> FleetSnapshot:
    now = 10_000
    hosts = [host(f"h{i}", draw(st.integers(1, 4))) for i in range(draw(st.integers(1, 4)))]
    allocations: list[Allocation] = []
    for h in hosts:
        free = list(range(h.gpu_count))
        while free and draw(st.booleans()):
            size = draw(st.integers(1, len(free)))
            taken, free = free[:size], free[size:]
            started = draw(st.integers(now - 2000, now))
            a = alloc(
                f"{h.id}-{len(allocations)}",
                h.id,
                set(taken),
                preemptible=draw(st.booleans()) or draw(st.booleans()),
                started_at=started,
                checkpoint_at=draw(st.none() | st.integers(started, now)),
            )
            allocations.append(replace(a, priority=draw(st.integers(-2, 2))))
    return FleetSnapshot.build(hosts, allocations)


@settings(max_examples=150, deadline=None)
@given(
    _fleets(),
    st.integers(1, 4),
    st.sampled_from([0, 600]),
    st.sampled_from([YoungestFirst(), LowestPriority(3), SeededRandom(5)]),
)
def test_the_search_finds_the_best_set_for_every_policy(
    snap: FleetSnapshot, gpus: int, min_runtime_s: int, policy: VictimPolicy
) -> None:
    now = 10_000
    if gpus > max(s.host.gpu_count for s in snap.hosts.values()):
        return
    best = _brute_force(snap, gpus, now, min_runtime_s, policy)
    config = SchedulerConfig(min_runtime_s=min_runtime_s, policy=policy)
    try:
        plan = place_on_demand(snap, on_demand("od", gpus), now, config)
    except InsufficientCapacity:
        assert best is None
        return
    assert best is not None
    victims = [snap.allocation(p.allocation_id) for p in plan.preemptions]
    if not victims:
        assert best[2] == 0
        return
    key = (
        sum(is_protected(v, now, min_runtime_s) for v in victims),
        sum(policy.cost(v, now) for v in victims),
        len(victims),
        max((v.last_interrupted_at or NEVER for v in victims), default=NEVER),
    )
    assert key == best
