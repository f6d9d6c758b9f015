"""The API's read-only views read the snapshot and indexed queries: a queued instance's entry
(node tickets ahead count), the pools, the operator's counts, and the one interruption reader
(the window's Preempted events of instances; old events without a GPU type read the instance)."""

from __future__ import annotations

import pytest
from plane_world import POOL, World

from lowcostgpu.app import operator_stats as stats
from lowcostgpu.app import queries
from lowcostgpu.app.clusters import ClusterRequest
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.core.queue import QueueEntry
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.ports.store import EventRecord
from lowcostgpu.ports.store_records import Commit

GPU = POOL.gpu_type


def _launch(w: World, gpus: int, kind: str = "interruptible") -> str:
    return w.plane.launch(LaunchRequest("acme", GPU, kind, gpus, command=("train",))).state.id


def _full_fleet_with_a_node_waiting(w: World) -> str:
    """One host of 8 GPUs held by a cluster's two nodes; a third (4 GPUs) waits in the queue
    (for the first node's GPUs: a target beyond what the pool could ever hold is refused)."""
    cluster = w.plane.clusters.create_cluster(
        ClusterRequest("acme", GPU, 4, 1, 4, grace_period_s=60)
    )
    w.plane.clusters.update_cluster_target(cluster.cluster.id, 4, "acme")
    _launch(w, 4, "on-demand")  # reclaims the preemptible node: its replacement waits
    w.tick(61)  # the node's grace (60 s) is over: it is gone, the on-demand instance holds its GPUs
    w.tick()  # and runs
    return cluster.cluster.id


def test_a_queued_instances_entry_counts_the_node_ticket_ahead_of_it() -> None:
    w = World()
    _full_fleet_with_a_node_waiting(w)
    queued = _launch(w, 2)
    behind = _launch(w, 1)
    found = queries.queue_entries(w.plane, [queued, behind, "i-nope"])
    # A full pool, and nothing in it drains on a known deadline: no honest ETA.
    assert found == {
        queued: QueueEntry(queued, 2, 4, None),
        behind: QueueEntry(behind, 3, 6, None),
    }
    assert queries.queue_entry_of(w.plane, behind) == found[behind]


def test_a_queued_instances_eta_is_the_deadline_of_a_stop_that_frees_its_gpus() -> None:
    w = World()
    w.plane.launch(LaunchRequest("acme", GPU, "on-demand", 4, command=("serve",)))
    running = _launch(w, 4)
    w.tick()
    queued = _launch(w, 4)
    assert queries.queue_entry_of(w.plane, queued) == QueueEntry(queued, 1, 0, None)
    stopping = w.plane.stop(running).state  # a stop drains on a deadline: its GPUs come back
    assert stopping.deadline is not None and stopping.deadline > w.clock.now()
    assert queries.queue_entry_of(w.plane, queued) == QueueEntry(queued, 1, 0, stopping.deadline)


def test_an_instance_that_is_not_queued_has_no_entry() -> None:
    w = World()
    running = _launch(w, 2)
    assert queries.queue_entries(w.plane, [running]) == {}
    assert queries.queue_entry_of(w.plane, running) is None


def test_pools_and_operator_counts_read_the_live_state() -> None:
    w = World()
    _full_fleet_with_a_node_waiting(w)
    _launch(w, 2)
    (pool,) = queries.pools(w.plane)
    assert (pool.free_gpus, pool.on_demand_gpus, pool.interruptible_gpus) == (0, 8, 0)
    assert (pool.queue_depth, pool.queued_gpus) == (2, 6)
    assert stats.node_gpus(w.plane) == {(POOL.region, GPU): {"standard": 4, "preemptible": 0}}
    assert stats.instance_counts(w.plane) == {"queued": 1, "running": 1}


def _preempted(
    key: str,
    at: int,
    subject: str,
    gpu_type: str | None,
    kind: str = "instance",
    run_s: int | None = None,
) -> EventRecord:
    data: dict[str, object] = {} if gpu_type is None else {"gpu_type": gpu_type}
    if run_s is not None:
        data["run_s"] = run_s
    return EventRecord(
        key, at, "acme", kind, subject, EventType.WARNING, Reason.PREEMPTED, "m", data
    )


def test_interruption_statistics_read_the_windows_preempted_events_of_instances() -> None:
    w = World()
    a = _launch(w, 8)  # running
    b = _launch(w, 1)  # queued behind it
    now = w.clock.now()
    window = queries.STATS_WINDOW_S
    old = EventRecord("x", now - 1, "acme", "instance", a, EventType.NORMAL, Reason.QUEUED, "m")
    w.store.commit(
        Commit(
            events=[
                _preempted("1", now - 100, a, None),  # written before events named the type
                _preempted("2", now - 40, a, GPU),
                _preempted("3", now - 10, a, GPU),
                _preempted("4", now - window - 1, b, GPU),  # before the window
                _preempted("5", now - 5, "c-1-n0", GPU, kind="node"),  # a node, not an instance
                _preempted("6", now - 5, "i-gone", None),  # no type, no instance: left out
                _preempted("7", now - 5, "i-h100", "h100-sxm"),  # another type
                old,  # not a Preempted event
            ]
        )
    )
    (row,) = queries.interruption_statistics(w.plane)
    assert row == {
        "gpu_type": GPU,
        "window_s": window,
        "interruptions": 3,
        "interruptions_per_hour": 3 / (window / 3600) / 2,  # a and b are live interruptible
        "median_time_between_interruptions_s": 45,  # gaps of 60 and 30 s
    }
    (h100,) = queries.interruption_statistics(w.plane, gpu_types=["h100-sxm"])
    assert (h100["interruptions"], h100["median_time_between_interruptions_s"]) == (1, None)
    assert queries.instance_interruption_statistics(w.plane, b) == row


@pytest.mark.parametrize(
    ("runs_s", "median_s"),
    [
        ([], None),  # never interrupted: nothing to say
        ([600], 600),  # one interruption is enough: how long that run had run
        ([600, 60, 3600], 600),
        ([0, 0, 7200, 7200], 3600),
    ],
)
def test_the_median_time_between_interruptions_is_how_long_interrupted_runs_had_run(
    runs_s: list[int], median_s: int | None
) -> None:
    w = World()
    a = _launch(w, 8)
    now = w.clock.now()
    events = [_preempted(f"r{i}", now - 50 + i, a, GPU, run_s=r) for i, r in enumerate(runs_s)]
    w.store.commit(Commit(events=events))
    (row,) = queries.interruption_statistics(w.plane)
    assert (row["interruptions"], row["median_time_between_interruptions_s"]) == (
        len(runs_s),
        median_s,
    )


def test_interruption_statistics_page_through_more_events_than_one_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    w = World()
    a = _launch(w, 8)
    now = w.clock.now()
    monkeypatch.setattr(queries, "EVENT_PAGE", 3)
    w.store.commit(Commit(events=[_preempted(f"e{i}", now - 70 + i, a, GPU) for i in range(7)]))
    (row,) = queries.interruption_statistics(w.plane)
    assert (row["interruptions"], row["median_time_between_interruptions_s"]) == (7, 1)
