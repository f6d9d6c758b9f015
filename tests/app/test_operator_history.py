"""The operator's queue-depth and reclaim history from the store: a reclaim and a queue seen in
their buckets; an instance that waited since before the window and left it inside the window
counted from the window's start (older events read for it, and only for it); the same answer
from a SQLite store reopened as after a restart."""

from __future__ import annotations

from pathlib import Path

from plane_world import POOL, World

from lowcostgpu.adapters.store.sql import SqlStore
from lowcostgpu.app.fleet_history import fleet_history, window_events
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus

PRE = str(POOL)


def _launch(w: World, type_: str, gpus: int = 8) -> str:
    request = LaunchRequest("acme", "a100-sxm4", type_, gpus, command=("train",))  # type: ignore[arg-type]
    return w.plane.launch(request).state.id


def _queue_and_reclaim(w: World) -> tuple[str, str]:
    """A runs; B queues behind it; an on-demand launch reclaims A, which is requeued."""
    a = _launch(w, "interruptible")
    w.tick()
    w.tick(10)
    b = _launch(w, "interruptible")
    w.tick(30)
    _launch(w, "on-demand")
    w.tick(1)
    w.runtime.finish(w.allocation(a), 0)
    w.tick(5)
    assert w.store.instance(a).state.status is InstanceStatus.QUEUED
    return a, b


def test_the_queue_and_a_reclaim_show_in_their_buckets() -> None:
    w = World()
    start = w.clock.now()
    _queue_and_reclaim(w)
    h = fleet_history(w.plane, 3600, 60)
    assert h.pools == [PRE]
    last = h.points[-1]
    assert (last.total.depth, last.pools[PRE].depth) == (2, 2)  # A requeued behind B
    assert sum(p.total.reclaims for p in h.points) == 1
    reclaimed = next(p for p in h.points if p.total.reclaims)
    assert reclaimed.start <= start + 41 < reclaimed.start + 60
    assert max(p.total.peak for p in h.points) == 2
    assert h.lookback_s == 0 and h.events_read == len(window_events(w.store, 0, 2**62))


def test_an_instance_waiting_since_before_the_window_counts_from_its_start_until_stopped() -> None:
    w = World()
    _launch(w, "on-demand")  # holds every GPU: what follows waits
    w.tick()
    waiting = _launch(w, "interruptible")
    done = _launch(w, "interruptible", gpus=1)
    w.plane.stop(done)  # stopped from the queue before the window …
    w.tick(3 * 3600)
    w.plane.delete(done)  # … and deleted in it: its last state before the window is read
    w.tick(600)
    w.plane.stop(waiting)  # the window's first event of `waiting` is Stopped: it waited or not?
    w.tick(600)
    h = fleet_history(w.plane, 3600, 60)
    stopped_at = w.clock.now() - 600
    depths = [(p.start, p.total.depth) for p in h.points]
    assert all(d == (1 if s + 60 <= stopped_at else 0) for s, d in depths)
    assert depths[0][1] == 1  # it waited when the window opened (read from older events)
    assert h.lookback_s >= 3600 - 1200  # older events were read to know it


def test_a_deleted_instance_keeps_its_pool_and_a_finished_one_never_counts() -> None:
    w = World()
    a = _launch(w, "interruptible", gpus=1)
    w.tick()
    w.tick(1)
    w.runtime.finish(w.allocation(a), 0)
    w.tick(1)
    w.tick(2 * 3600)
    w.plane.delete(a)  # Deleted is its only event in the window: unknown, then settled
    w.tick(60)
    h = fleet_history(w.plane, 3600, 60)
    assert all(p.total.depth == 0 and p.total.peak == 0 for p in h.points)
    assert h.lookback_s > 0


def test_the_history_is_the_same_after_a_restart_on_the_same_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = SqlStore.open(url)
    w = World(store=store)
    _queue_and_reclaim(w)
    w.tick(120)
    before = fleet_history(w.plane, 3600, 60)
    store.close()
    reopened = SqlStore.open(url)
    try:
        again = World(store=reopened)
        again.clock.advance(w.clock.now() - again.clock.now())  # the same moment
        after = fleet_history(again.plane, 3600, 60)
    finally:
        reopened.close()
    assert after.points == before.points
    assert sum(p.total.reclaims for p in after.points) == 1
    assert after.points[-1].total.depth == 2


def test_reclaims_of_the_fleet_endpoint_read_only_the_window() -> None:
    w = World()
    _queue_and_reclaim(w)
    events = window_events(w.store, w.clock.now() - 60, w.clock.now() + 1)
    assert Reason.PREEMPTED in {e.reason for e in events}
    assert all(e.at >= w.clock.now() - 60 for e in events)
