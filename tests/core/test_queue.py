"""The preemptible queue: FIFO, requeue at the original place, no starvation, positions and ETAs."""

from __future__ import annotations

import pytest
from fleet_builders import POOL, alloc, host, ticket

from lowcostgpu.core.queue import queue_status, schedule_queue
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.snapshot import FleetSnapshot, apply_plan, enqueue, release
from lowcostgpu.domain.errors import Conflict, InvalidRequest


def test_tickets_are_placed_in_fifo_order() -> None:
    snap = FleetSnapshot.build(
        [host("h1", 2)], tickets=[ticket("c", enqueued_at=3), ticket("a", enqueued_at=1)]
    )
    snap = enqueue(snap, ticket("b", enqueued_at=2))
    plan = schedule_queue(snap, 10, SchedulerConfig())
    assert [p.subject_id for p in plan.placements] == ["a", "b"]
    assert [t.subject_id for t in apply_plan(snap, plan, 10).queue(POOL)] == ["c"]


def test_a_requeued_ticket_goes_back_to_its_original_place() -> None:
    snap = FleetSnapshot.build([host("h1", 1)], tickets=[ticket("later", enqueued_at=50)])
    snap = enqueue(snap, ticket("interrupted", enqueued_at=5))
    assert [t.subject_id for t in snap.queue(POOL)] == ["interrupted", "later"]


def test_a_ticket_cannot_be_queued_twice_or_be_bigger_than_a_host() -> None:
    snap = FleetSnapshot.build([host("h1", 4)], tickets=[ticket("a")])
    with pytest.raises(Conflict):
        enqueue(snap, ticket("a"))
    with pytest.raises(InvalidRequest, match="ask for 1 to 4 GPUs"):
        enqueue(snap, ticket("big", gpus=5))


def test_small_tickets_backfill_around_a_blocked_head_before_the_bound() -> None:
    snap = FleetSnapshot.build(
        [host("h1", 4)],
        [alloc("x", "h1", {0, 1})],
        [ticket("big", 4, enqueued_at=0), ticket("small", 1, enqueued_at=1)],
    )
    plan = schedule_queue(snap, 299, SchedulerConfig(head_reservation_after_s=300))
    assert [p.subject_id for p in plan.placements] == ["small"]
    assert plan.reservations == ()


def test_a_head_waiting_past_the_bound_reserves_a_host_that_backfill_cannot_take() -> None:
    snap = FleetSnapshot.build(
        [host("h1", 4), host("h2", 4)],
        [alloc("x", "h1", {0, 1}), alloc("y", "h2", {0, 1, 2})],
        [ticket("big", 4, enqueued_at=0), ticket("small", 1, enqueued_at=1)],
    )
    plan = schedule_queue(snap, 300, SchedulerConfig(head_reservation_after_s=300))
    assert [(r.subject_id, r.host_id) for r in plan.reservations] == [("big", "h1")]
    assert [(p.subject_id, p.host_id) for p in plan.placements] == [("small", "h2")]


def test_a_big_request_does_not_starve_behind_a_stream_of_small_ones() -> None:
    config = SchedulerConfig(head_reservation_after_s=60)
    snap = FleetSnapshot.build([host("h1", 4)], tickets=[ticket("s0", 1, enqueued_at=0)])
    snap = apply_plan(snap, schedule_queue(snap, 0, config), 0)
    snap = enqueue(snap, ticket("big", 4, enqueued_at=1))
    placed_big_at = None
    for now in range(2, 2000):
        snap = enqueue(snap, ticket(f"s{now}", 1, enqueued_at=now))
        for a in list(snap.allocations()):
            if a.subject_id != "big" and now - a.started_at >= 30:
                snap = release(snap, a.id)
        plan = schedule_queue(snap, now, config)
        snap = apply_plan(snap, plan, now)
        if any(p.subject_id == "big" for p in plan.placements):
            placed_big_at = now
            break
    assert placed_big_at is not None and placed_big_at <= 61 + 30


def test_queue_positions_and_eta() -> None:
    snap = FleetSnapshot.build(
        [host("h1", 4)],
        [alloc("x", "h1", range(4))],
        [ticket("a", 2, enqueued_at=1), ticket("b", 4, enqueued_at=2)],
    )
    a, b = queue_status(snap, POOL, 100, ends=[(400, 2)])  # x drains two GPUs by 400
    assert (a.position, a.gpus_ahead, a.eta_at) == (1, 0, 400)
    assert (b.position, b.gpus_ahead, b.eta_at) == (2, 2, None)  # 6 wanted, 2 known to end
    assert queue_status(snap, POOL, 100)[0].eta_at is None  # a full pool, nothing known to end
