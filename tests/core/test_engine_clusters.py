"""Clusters through the engine: standard nodes placed at once, preemptible nodes in the shared
queue, reclaimed like interruptible instances, drained, removed and refilled."""

from __future__ import annotations

import pytest
from fleet_builders import POOL, host

from lowcostgpu.core import cluster_engine, engine
from lowcostgpu.core.clusters import ClusterSpec
from lowcostgpu.core.drain import WorkloadExited
from lowcostgpu.core.effects import (
    AddNode,
    CordonNode,
    EmitEvent,
    KillWorkload,
    RemoveNode,
    SignalWorkload,
    StartWorkload,
)
from lowcostgpu.core.engine import EngineState, EngineStep, LaunchSpec
from lowcostgpu.core.nodes import allocated_preemptible_gpus
from lowcostgpu.core.scheduler import SchedulerConfig
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.errors import InsufficientCapacity, InvalidRequest
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.domain.status import ClusterStatus, InstanceStatus, NodeStatus

T0 = 10_000
CONFIG = SchedulerConfig(min_runtime_s=0)
_N = NodeStatus


def fleet(*sizes: int) -> EngineState:
    return EngineState(FleetSnapshot.build([host(f"h{i}", n) for i, n in enumerate(sizes)]))


def create(
    state: EngineState, desired: int, *, standard: int = 1, size: int = 4, grace: int = 60
) -> EngineStep:
    spec = ClusterSpec(POOL, size, standard, desired, grace_period_s=grace)
    return cluster_engine.create_cluster(state, "c1", spec, T0, CONFIG, account_id="acct")


def on_demand(state: EngineState, name: str, gpus: int, now: int) -> EngineStep:
    spec = LaunchSpec(name, POOL, gpus, CapacityClass.ON_DEMAND, account_id="acct")
    return engine.launch(state, spec, now, CONFIG)


def reasons(step: EngineStep, object_id: str) -> list[Reason]:
    return [e.reason for e in step.effects if isinstance(e, EmitEvent) and e.object_id == object_id]


def nodes_in(state: EngineState, status: NodeStatus, preemptible: bool = True) -> list[str]:
    return sorted(
        n.id for n in state.nodes.values() if n.status is status and n.preemptible is preemptible
    )


def rebuilt(state: EngineState) -> EngineState:
    hosts = [hs.host for hs in state.fleet.hosts.values()]
    return engine.state_from_instances(
        hosts,
        state.instances.values(),
        clusters=state.clusters.values(),
        nodes=state.nodes.values(),
    )


def assert_rebuilds(state: EngineState) -> None:
    again = rebuilt(state)
    key = lambda a: a.id  # noqa: E731
    assert sorted(again.fleet.allocations(), key=key) == sorted(state.fleet.allocations(), key=key)
    assert list(again.fleet.tickets()) == list(state.fleet.tickets())


def test_standard_nodes_are_placed_at_once_and_preemptible_ones_fill_from_the_queue() -> None:
    step = create(fleet(8, 8), desired=8)
    state = step.state
    assert nodes_in(state, _N.READY, preemptible=False) == ["c1-n1"]
    assert nodes_in(state, _N.READY) == ["c1-n2", "c1-n3"]
    adds = [e for e in step.effects if isinstance(e, AddNode)]
    assert [(a.node_id, a.compute_class) for a in adds] == [
        ("c1-n1", "standard"),
        ("c1-n2", "preemptible"),
        ("c1-n3", "preemptible"),
    ]
    assert allocated_preemptible_gpus(state.nodes.values()) == 8
    assert reasons(step, "c1") == [Reason.TARGET_MET]
    assert state.clusters["c1"].target_met is True
    assert_rebuilds(state)


def test_a_cluster_whose_standard_nodes_cannot_be_placed_now_is_refused_and_changes_nothing() -> (
    None
):
    state = on_demand(fleet(4, 4), "busy", 4, T0 - 10).state  # the pool could hold 2 nodes
    with pytest.raises(InsufficientCapacity, match="no capacity for 4"):
        create(state, desired=0, standard=2)
    assert dict(state.clusters) == {} and dict(state.nodes) == {}


@pytest.mark.parametrize(("standard", "refused"), [(2, False), (3, True)])
def test_standard_nodes_beyond_what_the_pool_could_ever_hold_are_refused(
    standard: int, refused: bool
) -> None:
    if refused:
        with pytest.raises(InvalidRequest, match="can hold at most 2 node"):
            create(fleet(4, 4), desired=0, standard=standard)
    else:
        assert len(create(fleet(4, 4), desired=0, standard=standard).state.nodes) == 2


@pytest.mark.parametrize(
    ("standard", "desired", "size", "fragment"),
    [
        (0, 8, 4, "at least one standard node"),
        (1, 6, 4, "multiple of the node size"),
        (1, 0, 16, "a node must fit one host"),
    ],
)
def test_clusters_that_cannot_be_honoured_are_refused(
    standard: int, desired: int, size: int, fragment: str
) -> None:
    with pytest.raises(InvalidRequest, match=fragment):
        create(fleet(8), desired=desired, standard=standard, size=size)


def test_a_preemptible_node_is_reclaimed_like_an_instance_and_the_cluster_refills() -> None:
    state = create(fleet(8), desired=4).state  # h0: standard node 0-3, preemptible node 4-7
    victim = nodes_in(state, _N.READY)[0]
    enqueued_at = state.nodes[victim].enqueued_at
    step = on_demand(state, "od", 4, T0 + 100)
    kinds = [type(e) for e in step.effects if not isinstance(e, EmitEvent)]
    assert kinds[:2] == [CordonNode, SignalWorkload]
    (preempted,) = [e for e in step.effects if getattr(e, "reason", None) is Reason.PREEMPTED]
    assert preempted.object_id == victim and preempted.event_type is EventType.WARNING
    node = step.state.nodes[victim]
    assert (node.status, node.drain_reason, node.billed_until) == (
        _N.CORDONED,
        "preempted",
        T0 + 100,
    )
    # Back in line at T+0, at the reclaimed node's place; nothing is free, so the target is unmet.
    (replacement,) = nodes_in(step.state, _N.PENDING)
    assert step.state.nodes[replacement].enqueued_at == enqueued_at
    assert step.state.nodes[replacement].replaces == victim
    assert reasons(step, "c1") == [Reason.TARGET_UNMET]
    assert step.state.instances["od"].status is InstanceStatus.STARTING
    assert_rebuilds(step.state)

    # The node's pods leave in their grace period: removed, and the on-demand work starts.
    gone = cluster_engine.node_exited(step.state, victim, T0 + 130, CONFIG)
    assert gone.state.nodes[victim].status is _N.REMOVED
    assert RemoveNode(victim) in gone.effects
    assert next(e for e in gone.effects if isinstance(e, StartWorkload)).subject_id == "od"
    assert Reason.NODE_REMOVED in reasons(gone, victim)
    assert_rebuilds(gone.state)

    # The on-demand work ends: its GPUs go to the replacement, the target is met again.
    state = engine.report(gone.state, "od", WorkloadExited(0), T0 + 500, CONFIG).state
    assert nodes_in(state, _N.READY) == [replacement]
    assert state.clusters["c1"].target_met is True
    assert allocated_preemptible_gpus(state.nodes.values()) == 4
    assert state.nodes[victim].status is _N.REMOVED, "kept, so that the shell writes it"
    assert victim not in engine.forget_history(state).nodes
    assert victim not in rebuilt(state).nodes, "history is not loaded back"


def test_a_node_still_draining_at_its_deadline_is_killed_and_removed() -> None:
    state = create(fleet(8), desired=4, grace=60).state
    victim = nodes_in(state, _N.READY)[0]
    state = on_demand(state, "od", 4, T0 + 100).state
    assert engine.next_wake(state) == T0 + 160
    early = engine.tick(state, T0 + 159, CONFIG)
    assert early.state.nodes[victim].status is _N.CORDONED
    late = engine.tick(early.state, T0 + 160, CONFIG)
    assert KillWorkload(victim, f"{victim}@{T0}") in late.effects
    assert late.state.nodes[victim].status is _N.REMOVED
    assert late.state.instances["od"].status is InstanceStatus.STARTING
    assert any(isinstance(e, StartWorkload) for e in late.effects)


def test_standard_nodes_are_never_reclaimed() -> None:
    state = create(fleet(8), desired=0, standard=2).state
    with pytest.raises(InsufficientCapacity, match="0 held by preemptible work"):
        on_demand(state, "od", 4, T0 + 100)


def test_nodes_and_interruptible_instances_share_one_fifo_queue() -> None:
    state = fleet(8)
    spec = LaunchSpec("early", POOL, 4, CapacityClass.INTERRUPTIBLE)
    state = engine.launch(state, spec, T0 - 50, CONFIG).state  # takes 4 GPUs
    state = create(state, desired=4).state  # standard node: the other 4; the preemptible waits
    late = engine.launch(state, LaunchSpec("late", POOL, 4, CapacityClass.INTERRUPTIBLE), T0 + 1)
    order = [t.subject_id for t in late.state.fleet.queue(POOL)]
    assert order == ["c1-n2", "late"]
    freed = engine.report(late.state, "early", WorkloadExited(0), T0 + 10, CONFIG).state
    assert nodes_in(freed, _N.READY) == ["c1-n2"], "the oldest ticket is placed first"


def test_lowering_the_target_drains_the_newest_nodes_and_raising_it_queues_new_ones() -> None:
    state = create(fleet(8, 8), desired=8).state
    down = cluster_engine.update_cluster_target(state, "c1", 4, T0 + 10, CONFIG)
    assert nodes_in(down.state, _N.CORDONED) == ["c1-n3"]
    assert reasons(down, "c1-n3") == [Reason.CORDONED]
    assert down.state.nodes["c1-n3"].drain_reason == "scale-down"
    up = cluster_engine.update_cluster_target(down.state, "c1", 12, T0 + 20, CONFIG)
    assert nodes_in(up.state, _N.READY) == ["c1-n2", "c1-n4"]
    assert nodes_in(up.state, _N.PENDING) == ["c1-n5"]
    with pytest.raises(InvalidRequest, match="nearest valid values are 4 and 8"):
        cluster_engine.update_cluster_target(up.state, "c1", 6, T0 + 30, CONFIG)


@pytest.mark.parametrize(("desired", "events"), [(4, [("TargetChanged", 8, 4)]), (8, [])])
def test_a_target_change_is_an_event_with_the_old_and_new_target(
    desired: int, events: list[tuple[str, int, int]]
) -> None:
    state = create(fleet(8, 8), desired=8).state
    step = cluster_engine.update_cluster_target(state, "c1", desired, T0 + 10, CONFIG)
    changed = [
        (e.reason.value, e.data["from"], e.data["to"])
        for e in step.effects
        if isinstance(e, EmitEvent) and e.reason is Reason.TARGET_CHANGED and e.object_id == "c1"
    ]
    assert changed == events


def test_delete_drains_every_node_then_the_cluster_is_gone() -> None:
    state = create(fleet(8), desired=4, grace=30).state
    step = cluster_engine.delete_cluster(state, "c1", T0 + 10, CONFIG)
    assert step.state.clusters["c1"].status is ClusterStatus.DELETING
    assert nodes_in(step.state, _N.CORDONED) + nodes_in(step.state, _N.CORDONED, False) == [
        "c1-n2",
        "c1-n1",
    ]
    done = engine.tick(step.state, T0 + 40, CONFIG)
    assert done.state.clusters["c1"].status is ClusterStatus.DELETED
    assert Reason.DELETED in reasons(done, "c1")
    assert dict(engine.forget_history(done.state).clusters) == {}
    assert dict(rebuilt(done.state).clusters) == {}
    assert all(hs.free == 8 for hs in done.state.fleet.hosts.values())


def test_the_node_ticket_carries_the_reclaim_it_makes_up_for() -> None:
    state = create(fleet(8), desired=4).state
    victim = nodes_in(state, _N.READY)[0]
    state = on_demand(state, "od", 4, T0 + 100).state
    (ticket,) = [t for t in state.fleet.queue(POOL) if t.subject_id != "od"]
    assert ticket.last_interrupted_at == T0 + 100
    assert state.nodes[ticket.subject_id].replaces == victim
