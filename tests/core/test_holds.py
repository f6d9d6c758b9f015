"""On-demand holds: a refused on-demand customer's retry finds the GPUs that freed meanwhile."""

from __future__ import annotations

import pytest
from fleet_builders import POOL, host

from lowcostgpu.core import engine
from lowcostgpu.core.effects import StartWorkload
from lowcostgpu.core.engine import EngineState, EngineStep, LaunchSpec
from lowcostgpu.core.holds import OnDemandHold, active, after_placement, with_refusal
from lowcostgpu.core.lifecycle import WorkloadExited, WorkloadStarted
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.errors import InsufficientCapacity
from lowcostgpu.domain.status import InstanceStatus

HOLD_S = 300
CONFIG = SchedulerConfig(min_runtime_s=60, on_demand_hold_s=HOLD_S)
ODC, INT = CapacityClass.ON_DEMAND, CapacityClass.INTERRUPTIBLE
OTHER = PoolKey("eu", "rtx-4090")


def started(step: EngineStep) -> list[str]:
    return [e.subject_id for e in step.effects if isinstance(e, StartWorkload)]


def refused_world(refused_at: int = 100, config: SchedulerConfig = CONFIG) -> EngineStep:
    """One 4-GPU host held by on-demand `od-a`; `od-b` (4 GPUs) is refused at `refused_at`
    and `q` (interruptible, 4 GPUs) waits in the queue."""
    state = EngineState(FleetSnapshot.build([host("h1", 4)]))
    step = engine.launch(state, LaunchSpec("od-a", POOL, 4, ODC), 0, config)
    step = engine.report(step.state, "od-a", WorkloadStarted(), 0, config)
    step = engine.launch(step.state, LaunchSpec("q", POOL, 4, INT), 10, config)
    with pytest.raises(InsufficientCapacity):
        engine.launch(step.state, LaunchSpec("od-b", POOL, 4, ODC), refused_at, config)
    return engine.refused(step.state, POOL, 4, refused_at, config)


@pytest.mark.parametrize(
    ("freed_at", "queue_starts"),
    [
        (100 + HOLD_S - 1, False),  # the last second of the hold: the GPUs wait for od-b
        (100 + HOLD_S, True),  # the hold has ended: the queue gets them
    ],
)
def test_gpus_freed_during_a_hold_wait_for_the_refused_customer(
    freed_at: int, queue_starts: bool
) -> None:
    step = refused_world()
    assert step.wake_at == 100 + HOLD_S  # the shell ticks when the hold ends
    step = engine.report(step.state, "od-a", WorkloadExited(0), freed_at, CONFIG)
    assert ("q" in started(step)) is queue_starts
    if not queue_starts:
        retry = engine.launch(step.state, LaunchSpec("od-b", POOL, 4, ODC), freed_at, CONFIG)
        assert started(retry) == ["od-b"]  # at once: no victim to drain
        assert dict(retry.state.holds) == {}  # placed: the hold is over
        assert retry.state.instance("q").status is InstanceStatus.QUEUED


def test_the_retry_ends_the_hold_and_the_queue_gets_what_it_left_at_once() -> None:
    state = EngineState(FleetSnapshot.build([host("h1", 4)]))
    step = engine.launch(state, LaunchSpec("od-a", POOL, 4, ODC), 0, CONFIG)
    step = engine.launch(step.state, LaunchSpec("q", POOL, 2, INT), 10, CONFIG)
    with pytest.raises(InsufficientCapacity):
        engine.launch(step.state, LaunchSpec("od-b", POOL, 2, ODC), 100, CONFIG)
    step = engine.refused(step.state, POOL, 2, 100, CONFIG)
    step = engine.report(step.state, "od-a", WorkloadExited(0), 150, CONFIG)
    assert started(step) == []  # all 4 held
    retry = engine.launch(step.state, LaunchSpec("od-b", POOL, 2, ODC), 160, CONFIG)
    assert started(retry) == ["od-b", "q"]


def test_the_queue_gets_the_gpus_at_the_tick_that_ends_the_hold() -> None:
    step = refused_world()
    step = engine.report(step.state, "od-a", WorkloadExited(0), 200, CONFIG)
    assert started(step) == []
    step = engine.tick(step.state, 100 + HOLD_S, CONFIG)
    assert started(step) == ["q"]
    assert dict(step.state.holds) == {}


def test_holds_disabled_give_freed_gpus_to_the_queue_at_once() -> None:
    config = SchedulerConfig(min_runtime_s=60, on_demand_hold_s=0)
    step = refused_world(config=config)
    assert dict(step.state.holds) == {}
    step = engine.report(step.state, "od-a", WorkloadExited(0), 200, config)
    assert started(step) == ["q"]


def test_a_hold_keeps_one_host_and_leaves_the_others_to_the_queue() -> None:
    state = EngineState(FleetSnapshot.build([host("h1", 4), host("h2", 4)]))
    step = engine.launch(state, LaunchSpec("q1", POOL, 2, INT), 0, CONFIG)
    step = engine.launch(step.state, LaunchSpec("q2", POOL, 2, INT), 0, CONFIG)
    step = engine.refused(step.state, POOL, 4, 0, CONFIG)
    step = engine.launch(step.state, LaunchSpec("q3", POOL, 4, INT), 1, CONFIG)
    placed = {i.id: i.host_id for i in step.state.instances.values() if i.host_id}
    # q1 and q2 were placed before the hold (best fit packs them on h1); h2, the host with the
    # most free GPUs, is held for the 4-GPU on-demand retry, so q3 waits.
    assert placed == {"q1": "h1", "q2": "h1"}
    assert step.state.instance("q3").status is InstanceStatus.QUEUED


@pytest.mark.parametrize(
    ("first", "second", "gpus", "until"),
    [
        (2, 4, 4, 150 + HOLD_S),  # renewed, for the larger request
        (4, 2, 4, 150 + HOLD_S),  # renewed, and still for the larger one
    ],
)
def test_a_second_refusal_renews_the_hold_for_the_larger_request(
    first: int, second: int, gpus: int, until: int
) -> None:
    holds = with_refusal({}, POOL, first, 100, HOLD_S, "acme")
    holds = with_refusal(holds, POOL, second, 150, HOLD_S, "acme")
    waiting = frozenset({("acme", first), ("acme", second)})
    assert holds == {POOL: OnDemandHold(POOL, gpus, until, waiting)}


def test_an_ended_hold_is_forgotten_and_a_new_refusal_starts_afresh() -> None:
    holds = with_refusal({}, POOL, 8, 0, HOLD_S, "acme")
    holds = with_refusal(holds, OTHER, 1, HOLD_S, HOLD_S, "acme")
    assert holds == {OTHER: OnDemandHold(OTHER, 1, 2 * HOLD_S, frozenset({("acme", 1)}))}
    assert active(holds, 2 * HOLD_S - 1) == holds
    assert active(holds, 2 * HOLD_S) == {}


def held_for(*refused: tuple[str, int]) -> OnDemandHold:
    holds: dict[PoolKey, OnDemandHold] = {}
    for requester, gpus in refused:
        holds = with_refusal(holds, POOL, gpus, 100, HOLD_S, requester)
    return holds[POOL]


@pytest.mark.parametrize(
    ("refused", "placed", "placed_gpus", "left", "gpus"),
    [
        ([("a", 4), ("b", 4)], "a", 4, {("b", 4)}, 4),  # b still waits: the hold goes on
        ([("a", 4), ("b", 4)], "b", 4, {("a", 4)}, 4),
        ([("a", 4)], "a", 4, None, None),  # nobody left: the hold ends
        ([("a", 4), ("a", 4)], "a", 4, None, None),  # retries count once
        ([("a", 4)], "c", 4, {("a", 4)}, 4),  # someone else's placement: still held for a
        ([("a", 2)], "a", 4, None, None),  # a larger placement covers the request
        ([("a", 8)], "a", 4, {("a", 8)}, 8),  # a smaller one does not
        ([("a", 8), ("b", 2)], "b", 2, {("a", 8)}, 8),
        ([("a", 8), ("b", 2)], "a", 8, {("b", 2)}, 2),  # the reserve shrinks to who is left
        ([("a", 8), ("a", 2)], "a", 8, {("a", 2)}, 2),  # the exact request first
    ],
)
def test_a_placement_serves_one_waiting_request_and_the_hold_ends_when_none_is_left(
    refused: list[tuple[str, int]],
    placed: str,
    placed_gpus: int,
    left: set[tuple[str, int]] | None,
    gpus: int | None,
) -> None:
    hold = held_for(*refused)
    after = after_placement(hold, (placed, "i-new"), placed_gpus)
    if left is None:
        assert after is None
    else:
        assert after is not None and after.waiting == left and after.gpus == gpus
        assert after.until == hold.until  # never prolonged by a placement


def test_two_refused_customers_each_find_gpus_and_no_preemptible_run_starts_between() -> None:
    """The race that ended the hold at the first placement: od-b and od-c are refused; od-a's
    two hosts free one by one; od-b's retry takes the first, and the queue must not start `q`
    on the second, which od-c's retry would reclaim in the same second."""
    state = EngineState(FleetSnapshot.build([host("h1", 4), host("h2", 4)]))
    step = engine.launch(state, LaunchSpec("od-a1", POOL, 4, ODC, "a"), 0, CONFIG)
    step = engine.launch(step.state, LaunchSpec("od-a2", POOL, 4, ODC, "a"), 0, CONFIG)
    step = engine.launch(step.state, LaunchSpec("q", POOL, 4, INT, "q"), 10, CONFIG)
    for account in ("b", "c"):
        with pytest.raises(InsufficientCapacity):
            engine.launch(
                step.state, LaunchSpec(f"od-{account}", POOL, 4, ODC, account), 100, CONFIG
            )
        step = engine.refused(step.state, POOL, 4, 100, CONFIG, account)
    step = engine.report(step.state, "od-a1", WorkloadExited(0), 150, CONFIG)
    retry_b = engine.launch(step.state, LaunchSpec("od-b", POOL, 4, ODC, "b"), 151, CONFIG)
    assert started(retry_b) == ["od-b"]
    assert retry_b.state.holds[POOL].waiting == {("c", 4)}  # still held for c
    step = engine.report(retry_b.state, "od-a2", WorkloadExited(0), 160, CONFIG)
    assert started(step) == []  # q stays queued: h2 is held for c
    retry_c = engine.launch(step.state, LaunchSpec("od-c", POOL, 4, ODC, "c"), 161, CONFIG)
    assert started(retry_c) == ["od-c"] and dict(retry_c.state.holds) == {}
    assert retry_c.state.instance("q").status is InstanceStatus.QUEUED
