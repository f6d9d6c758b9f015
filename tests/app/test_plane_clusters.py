"""Clusters through the control plane on fakes: written with versions, drained, refilled."""

from __future__ import annotations

import pytest
from plane_world import World

from lowcostgpu.adapters.local.placeholder_nodes import PLACEHOLDER_ARGV, PlaceholderNodes
from lowcostgpu.adapters.store.memory import MemoryStore
from lowcostgpu.app.clusters import ClusterRequest, ClusterView
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.domain.errors import Conflict, InsufficientCapacity, InvalidRequest, NotFound
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.domain.status import ClusterStatus, InstanceStatus, NodeStatus
from lowcostgpu.ports.runtime import Runtime
from lowcostgpu.ports.store_records import OutboxEntry

_N = NodeStatus


def cluster(desired: int = 4, standard: int = 1, grace: int = 60) -> ClusterRequest:
    return ClusterRequest("acme", "a100-sxm4", 4, standard, desired, grace_period_s=grace)


def on_demand(gpus: int = 4) -> LaunchRequest:
    return LaunchRequest("acme", "a100-sxm4", "on-demand", gpus, command=("serve",))


def preemptible(view: ClusterView, status: NodeStatus = _N.READY) -> list[str]:
    return [n.id for n in view.nodes if n.preemptible and n.status is status]


def reasons(w: World, object_id: str) -> list[Reason]:
    return [e.reason for e in w.store.events() if e.object_id == object_id]


def node_allocation(w: World, node_id: str) -> str:
    (stored,) = [n for n in w.store.nodes(include_removed=True) if n.state.id == node_id]
    assert stored.state.allocation_id is not None
    return stored.state.allocation_id


def test_a_cluster_is_written_then_its_nodes_come_up_as_placeholder_workloads_at_once() -> None:
    w = World()
    view = w.plane.clusters.create_cluster(cluster(desired=4))
    assert view.cluster.desired_preemptible_gpus == 4 and view.allocated_preemptible_gpus == 4
    assert [n.status for n in view.nodes] == [_N.READY, _N.READY]
    # the nodes' placeholders start right after the commit, not at the loop's next tick
    started = [w.runtime.started(node_allocation(w, n.id)) for n in view.nodes]
    assert [s.argv for s in started] == [PLACEHOLDER_ARGV] * 2
    assert [s.env["LOWCOSTGPU_COMPUTE_CLASS"] for s in started] == ["standard", "preemptible"]
    assert w.store.cluster(view.cluster.id).version >= 1
    assert [c.cluster.id for c in w.plane.clusters.list_clusters("acme")] == [view.cluster.id]
    assert w.plane.clusters.list_clusters("someone-else") == []


def test_reclaim_drains_the_node_for_real_and_the_cluster_refills() -> None:
    w = World()
    c = w.plane.clusters.create_cluster(cluster(desired=4)).cluster.id
    w.tick()
    (victim,) = preemptible(w.plane.clusters.get_cluster(c))
    placeholder = node_allocation(w, victim)
    od = w.plane.launch(on_demand()).state.id
    w.tick(1)
    assert w.runtime.signals_of(placeholder) == ["SIGTERM"]
    preempted = next(e for e in w.store.events() if e.reason is Reason.PREEMPTED)
    assert (preempted.object_id, preempted.type) == (victim, EventType.WARNING)
    view = w.plane.clusters.get_cluster(c)
    assert view.allocated_preemptible_gpus == 0 and preemptible(view, _N.CORDONED) == [victim]
    assert Reason.TARGET_UNMET in reasons(w, c)
    w.runtime.finish(placeholder, 143)  # the placeholder leaves on SIGTERM
    w.tick(5)
    assert Reason.NODE_REMOVED in reasons(w, victim)
    w.tick(1)
    assert w.store.instance(od).state.status is InstanceStatus.RUNNING
    w.plane.stop(od)
    w.tick(1)
    w.runtime.finish(w.allocation(od), 0)
    w.tick(1)
    view = w.plane.clusters.get_cluster(c)
    (replacement,) = preemptible(view)
    assert replacement != victim and view.allocated_preemptible_gpus == 4
    assert reasons(w, c)[-1] is Reason.TARGET_MET
    w.tick(1)
    assert w.runtime.started(node_allocation(w, replacement)).argv == PLACEHOLDER_ARGV


def test_a_node_whose_placeholder_ignores_sigterm_is_killed_by_a_restarted_loop() -> None:
    w = World()
    c = w.plane.clusters.create_cluster(cluster(desired=4, grace=60)).cluster.id
    w.tick()
    (victim,) = preemptible(w.plane.clusters.get_cluster(c))
    w.plane.launch(on_demand())
    w.tick(1)
    restarted = World(store=w.store)  # a new server on the same store, same runtime
    restarted.runtime = w.runtime
    restarted.wired.runner.runtime = w.runtime
    restarted.plane.runtime = w.runtime
    placeholder = node_allocation(w, victim)
    (node,) = [n.state for n in w.store.nodes() if n.state.id == victim]
    assert node.deadline is not None
    restarted.clock.at = node.deadline - 1
    restarted.plane.tick()
    assert w.runtime.signals_of(placeholder) == ["SIGTERM"]
    restarted.clock.advance(1)
    restarted.plane.tick()
    assert Reason.KILLED in reasons(w, victim)
    assert placeholder not in w.runtime.running()
    (gone,) = [n.state for n in w.store.nodes(include_removed=True) if n.state.id == victim]
    assert gone.status is _N.REMOVED


def test_a_cluster_that_cannot_get_its_standard_nodes_is_refused_and_writes_nothing() -> None:
    w = World()
    w.plane.launch(on_demand(8))
    with pytest.raises(InsufficientCapacity):
        w.plane.clusters.create_cluster(cluster(desired=0))
    assert w.store.clusters(include_deleted=True) == []
    assert w.store.nodes(include_removed=True) == []


@pytest.mark.parametrize(
    ("request_", "error", "fragment"),
    [
        (cluster(standard=0), InvalidRequest, "at least one standard node"),
        (cluster(desired=6), InvalidRequest, "multiple of the node size"),
        (ClusterRequest("acme", "h200", 4), NotFound, "h200"),
        (ClusterRequest("acme", "a100-sxm4", 4, region="mars"), NotFound, "region mars"),
    ],
)
def test_bad_clusters_are_refused_clearly(
    request_: ClusterRequest, error: type[Exception], fragment: str
) -> None:
    w = World()
    with pytest.raises(error, match=fragment):
        w.plane.clusters.create_cluster(request_)
    assert w.store.clusters(include_deleted=True) == []


def test_target_updates_scale_and_delete_drains_everything() -> None:
    w = World()
    c = w.plane.clusters.create_cluster(cluster(desired=0, grace=30)).cluster.id
    w.tick()
    up = w.plane.clusters.update_cluster_target(c, 4, "acme")
    assert up.allocated_preemptible_gpus == 4
    with pytest.raises(NotFound):
        w.plane.clusters.update_cluster_target(c, 0, "someone-else")
    deleting = w.plane.clusters.delete_cluster(c, "acme")
    assert deleting.cluster.status is ClusterStatus.DELETING
    w.tick(1)
    for node in w.plane.clusters.get_cluster(c).nodes:
        w.runtime.finish(node_allocation(w, node.id), 143)
    w.tick(1)
    assert w.store.cluster(c).state.status is ClusterStatus.DELETED
    assert w.store.clusters() == [] and w.runtime.running() == []


def test_converting_a_node_in_place_is_refused_with_what_to_do() -> None:
    w = World()
    view = w.plane.clusters.create_cluster(cluster(desired=4))
    standard = next(n for n in view.nodes if not n.preemptible)
    with pytest.raises(Conflict, match="cannot be converted to preemptible in place") as info:
        w.plane.clusters.convert_node(view.cluster.id, standard.id, "preemptible")
    assert "desired_preemptible_gpus" in (info.value.hint or "")


def test_nodes_are_billed_from_ready_to_their_notice() -> None:
    w = World(store=MemoryStore())
    c = w.plane.clusters.create_cluster(cluster(desired=4)).cluster.id
    (node,) = preemptible(w.plane.clusters.get_cluster(c))
    w.tick(600)
    w.plane.launch(on_demand())  # reclaims it: its GPU billing stops here
    w.tick(600)
    billed = sum(u.quantity_s for u in w.store.usage() if u.subject_id == node)
    assert billed == 4 * 600


def test_an_instance_queued_behind_a_node_ticket_sees_its_true_position() -> None:
    w = World()
    w.plane.clusters.create_cluster(cluster(desired=4))  # the fleet is full
    w.plane.launch(on_demand())  # reclaims the preemptible node: its replacement waits
    w.tick(61)  # past the node's grace
    queued = w.plane.launch(
        LaunchRequest("acme", "a100-sxm4", "interruptible", 4, command=("train",))
    ).state.id
    from lowcostgpu.app.queries import queue_entry_of

    entry = queue_entry_of(w.plane, queued)
    assert entry is not None and entry.position == 2


def test_the_fleet_view_counts_gpus_that_cluster_nodes_hold() -> None:
    """A standard node holds on-demand capacity, a preemptible node interruptible capacity: the
    pools' free GPUs are what neither instances nor nodes hold."""
    from lowcostgpu.app.queries import pools

    w = World()  # one host of 8 GPUs
    w.plane.clusters.create_cluster(cluster(desired=4))  # a 4-GPU standard and a preemptible node
    (pool,) = pools(w.plane)
    assert (pool.gpus, pool.on_demand_gpus, pool.interruptible_gpus, pool.free_gpus) == (8, 4, 4, 0)


@pytest.mark.parametrize(
    ("host_gpus", "gpus_per_node", "accepted"),
    [
        ((8,), 8, True),
        ((8,), 4, False),
        ((8,), 9, False),
        ((4, 8), 8, True),
        ((4, 8), 4, False),  # it could land on half of the 8-GPU host
    ],
)
def test_where_nodes_are_whole_hosts_a_node_size_must_be_the_pools_largest_host(
    host_gpus: tuple[int, ...], gpus_per_node: int, accepted: bool
) -> None:
    from dataclasses import replace

    w = World(gpus=list(host_gpus))
    w.plane.config = replace(w.plane.config, whole_host_nodes=True)  # as on Slurm
    request = ClusterRequest("acme", "a100-sxm4", gpus_per_node, 1, 0)
    if accepted:
        assert w.plane.clusters.create_cluster(request).cluster.gpus_per_node == 8
        return
    with pytest.raises(InvalidRequest, match="a cluster node is a whole host") as refused:
        w.plane.clusters.create_cluster(request)
    assert f"(hosts of {', '.join(map(str, host_gpus))})" in refused.value.message
    assert refused.value.hint == "ask for gpus_per_node=8"
    assert w.plane.clusters.list_clusters("acme") == []


class RecordingNodes(PlaceholderNodes):
    """The placeholder provider, remembering the node effects it was handed."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, dict[str, object]]] = []

    def carry_out(self, entry: OutboxEntry, runtime: Runtime) -> None:
        self.seen.append((entry.kind, dict(entry.payload)))
        super().carry_out(entry, runtime)


def test_a_node_among_the_next_victims_is_warned_marked_shown_and_cleared() -> None:
    nodes = RecordingNodes()
    w = World(gpus=[4, 4, 4], nodes=nodes)  # standard node, preemptible node, one host free
    c = w.plane.clusters.create_cluster(cluster(desired=4)).cluster.id
    (node,) = preemptible(w.plane.clusters.get_cluster(c))
    od = w.plane.launch(on_demand()).state.id  # takes the free host: 4 asked for, 0 free
    (warning,) = [e for e in w.store.events() if e.reason is Reason.PREEMPTION_RISK]
    assert (warning.object_kind, warning.object_id, warning.account_id) == ("node", node, "acme")
    assert warning.data["cluster_id"] == c
    marks = [p for kind, p in nodes.seen if kind == "MarkNodeRisk"]
    assert [(p["node_id"], p["risk"]) for p in marks] == [(node, "next")]  # right after commit
    assert w.plane.clusters.get_cluster(c).risk_since == {node: warning.at}
    w.plane.reload()  # a lead regained (or a stale write): the warned are kept, as holds are
    assert w.plane.clusters.get_cluster(c).risk_since == {node: warning.at}
    w.tick(1)
    w.runtime.finish(w.allocation(od), 0)  # the on-demand work ends: its host frees
    w.tick(1)
    marks = [p for kind, p in nodes.seen if kind == "MarkNodeRisk"]
    assert [(p["node_id"], p["risk"]) for p in marks] == [(node, "next"), (node, "")]
    assert w.plane.clusters.get_cluster(c).risk_since == {}
    assert w.store.nodes(cluster_id=c)  # the node kept serving throughout
    assert w.plane.clusters.get_cluster(c).allocated_preemptible_gpus == 4
