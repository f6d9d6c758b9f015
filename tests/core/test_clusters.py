"""Clusters: validation, labels, conversion refusal, and reconcile scenarios."""

from __future__ import annotations

import pytest
from test_clusters_support import POOL, Sim

from lowcostgpu.core.cluster_reconcile import delete_cluster, reconcile_cluster
from lowcostgpu.core.clusters import (
    COMPUTE_CLASS_LABEL,
    DRAIN_CLUSTER_DELETE,
    DRAIN_SCALE_DOWN,
    ClusterSpec,
    NodeState,
    allocated_preemptible_gpus,
    convert_node_class,
    create_cluster,
    node_labels,
    node_taints,
    pending_preemptible_gpus,
    standard_node_requests,
    update_target,
    validate_cluster_spec,
)
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.errors import Conflict, IllegalTransition, InvalidRequest
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.domain.status import ClusterStatus, NodeStatus


def _node(node_id: str, cls: CapacityClass) -> NodeState:
    return NodeState(node_id, "c1", "acct", POOL, 8, cls, NodeStatus.READY)


@pytest.mark.parametrize("desired", [0, 8, 16, 64])
def test_targets_that_are_whole_nodes_are_accepted(desired: int) -> None:
    spec = ClusterSpec(POOL, gpus_per_node=8, standard_nodes=1, desired_preemptible_gpus=desired)
    assert validate_cluster_spec(spec) is spec


@pytest.mark.parametrize(
    ("desired", "hint"),
    [
        (4, "nearest valid values are 0 and 8"),
        (12, "nearest valid values are 8 and 16"),
        (17, "nearest valid values are 16 and 24"),
        (-8, "nearest valid value is 0"),
        (-1, "nearest valid value is 0"),
    ],
)
def test_targets_that_are_not_whole_nodes_are_refused_with_the_nearest_values(
    desired: int, hint: str
) -> None:
    spec = ClusterSpec(POOL, gpus_per_node=8, standard_nodes=1, desired_preemptible_gpus=desired)
    with pytest.raises(InvalidRequest) as info:
        validate_cluster_spec(spec)
    assert hint in str(info.value)
    assert str(desired) in str(info.value)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        (ClusterSpec(POOL, 8, 0, 16), "at least one standard node"),
        (ClusterSpec(POOL, 8, -1, 0), "at least one standard node"),
        (ClusterSpec(POOL, 0, 1, 0), "gpus_per_node must be a whole number ≥ 1"),
        (ClusterSpec(POOL, True, 1, 0), "gpus_per_node"),
        (ClusterSpec(POOL, 8, 1, "8"), "whole number of GPUs"),  # type: ignore[arg-type]
    ],
    ids=["no-standard", "negative-standard", "zero-node-size", "bool-node-size", "text-target"],
)
def test_specs_that_cannot_be_honoured_are_refused(spec: ClusterSpec, fragment: str) -> None:
    with pytest.raises(InvalidRequest, match=fragment):
        create_cluster("c1", spec, 0)


def test_a_cluster_without_standard_node_explains_why_they_are_needed() -> None:
    with pytest.raises(InvalidRequest) as info:
        validate_cluster_spec(ClusterSpec(POOL, 8, 0, 16))
    assert "never preempted" in str(info.value)


@pytest.mark.parametrize(
    ("have", "want", "fragments"),
    [
        (CapacityClass.ON_DEMAND, CapacityClass.INTERRUPTIBLE, ["standard node", "raise the"]),
        (
            CapacityClass.INTERRUPTIBLE,
            CapacityClass.ON_DEMAND,
            ["preemptible node", "add a standard"],
        ),
        (CapacityClass.ON_DEMAND, CapacityClass.ON_DEMAND, ["already a standard node"]),
    ],
)
def test_converting_a_node_in_place_is_always_refused(
    have: CapacityClass, want: CapacityClass, fragments: list[str]
) -> None:
    node = _node("n1", have)
    with pytest.raises(Conflict) as info:
        convert_node_class(node, want)
    assert info.value.code == "conflict"
    for fragment in fragments:
        assert fragment in str(info.value)
    if have is not want:
        assert "in place" in str(info.value) and "then remove this node" in str(info.value)


@pytest.mark.parametrize(
    ("cls", "label", "taints"),
    [
        (CapacityClass.ON_DEMAND, "standard", []),
        (CapacityClass.INTERRUPTIBLE, "preemptible", ["lowcostgpu.io/preemptible=true:NoSchedule"]),
    ],
)
def test_nodes_are_labelled_by_class_and_preemptible_ones_tainted(
    cls: CapacityClass, label: str, taints: list[str]
) -> None:
    node = _node("n1", cls)
    assert node_labels(node)[COMPUTE_CLASS_LABEL] == label
    assert node_labels(node)["lowcostgpu.io/cluster"] == "c1"
    assert [str(t) for t in node_taints(node)] == taints


def test_standard_node_requests_are_on_demand_for_the_missing_ones() -> None:
    cluster = create_cluster("c1", ClusterSpec(POOL, 8, 3, 0), 0, account_id="acct")
    requests = standard_node_requests(cluster, iter(["s1", "s2", "s3"]))
    assert [r.subject_id for r in requests] == ["s1", "s2", "s3"]
    assert {(r.capacity_class, r.gpus, r.pool, r.account_id) for r in requests} == {
        (CapacityClass.ON_DEMAND, 8, POOL, "acct")
    }
    live = [_node("s1", CapacityClass.ON_DEMAND)]
    assert [r.subject_id for r in standard_node_requests(cluster, ["x", "y"], live)] == ["x", "y"]


def test_scale_up_queues_one_ticket_per_node_in_the_pool_queue() -> None:
    sim = Sim.start(desired=24)
    plan = sim.reconcile()
    assert [n.id for n in plan.new_nodes] == ["n1", "n2", "n3"]
    assert [(t.subject_id, t.pool, t.gpus, t.enqueued_at, t.account_id) for t in plan.tickets] == [
        (f"n{i}", POOL, 8, 1000, "acct") for i in (1, 2, 3)
    ]
    assert all(n.status is NodeStatus.PENDING and n.preemptible for n in plan.new_nodes)
    assert [e.reason for e in plan.events] == [Reason.QUEUED] * 3
    assert pending_preemptible_gpus(sim.nodes.values()) == 24
    assert sim.reconcile().new_nodes == (), "a second reconcile does not queue twice"


def test_scale_down_drops_pending_nodes_first_then_the_newest_ready_ones() -> None:
    sim = Sim.start(desired=32)
    sim.reconcile()
    sim.place(limit=2)  # n1, n2 ready; n3, n4 pending
    sim.now = 2000
    sim.cluster = update_target(sim.cluster, 8, now=sim.now)
    plan = sim.reconcile()
    assert {n.id for n in plan.removed} == {"n3", "n4"}
    assert all(n.status is NodeStatus.REMOVED for n in plan.removed)
    assert set(plan.dequeued_ids) == {"n3", "n4"} and not sim.tickets
    assert [(d.node_id, d.reason) for d in plan.drains] == [("n2", DRAIN_SCALE_DOWN)]
    assert [e.reason for e in plan.events].count(Reason.NODE_REMOVED) == 2
    assert sim.reconcile().drains == (), "a node being drained is not chosen again"
    sim.finish_drains()
    assert allocated_preemptible_gpus(sim.nodes.values()) == 8


def test_scale_down_to_zero_never_touches_standard_nodes() -> None:
    sim = Sim.start(desired=16, standard=2)
    sim.reconcile()
    sim.place()
    sim.cluster = update_target(sim.cluster, 0, now=sim.now)
    plan = sim.reconcile()
    assert {d.node_id for d in plan.drains} == {"n1", "n2"}
    sim.finish_drains()
    assert len(sim.of(NodeStatus.READY, preemptible=False)) == 2


def test_ties_on_age_are_broken_by_id() -> None:
    sim = Sim.start(desired=24)
    sim.reconcile()
    sim.place()
    sim.cluster = update_target(sim.cluster, 8, now=sim.now)
    assert [d.node_id for d in sim.reconcile().drains] == ["n3", "n2"]


def test_a_reclaimed_node_is_replaced_at_its_original_queue_place() -> None:
    sim = Sim.start(desired=16)
    sim.reconcile()  # n1, n2 queued at t=1000
    sim.place()
    sim.now = 5000
    sim.preempt("n1")
    plan = sim.reconcile()  # at T+0, while n1 drains: the cluster is back in line at once
    (replacement,) = plan.new_nodes
    assert replacement.replaces == "n1"
    assert plan.tickets[0].enqueued_at == 1000, "kept the reclaimed node's place"
    assert plan.tickets[0].last_interrupted_at == 5000
    assert "replacing reclaimed node n1" in plan.events[0].message
    assert sim.reconcile().new_nodes == (), "a debt is paid once"
    sim.finish_drains()
    assert sim.reconcile().new_nodes == (), "the removal of n1 does not ask for a second one"


def test_a_lowered_target_forgives_replacement_debts() -> None:
    sim = Sim.start(desired=16)
    sim.reconcile()
    sim.place()
    sim.now = 5000
    sim.preempt("n1")
    sim.preempt("n2")
    sim.finish_drains()
    sim.cluster = update_target(sim.cluster, 8, now=5100)
    sim.cluster = update_target(sim.cluster, 16, now=5200)
    sim.now = 5200
    plan = sim.reconcile()
    assert [t.enqueued_at for t in plan.tickets] == [5200, 5200]
    assert all(n.replaces is None for n in plan.new_nodes)


def test_target_events_are_emitted_only_when_the_condition_changes() -> None:
    sim = Sim.start(desired=16)
    first = sim.reconcile()
    assert not [e for e in first.events if e.object_kind == "cluster"], "tickets not tried yet"
    unmet = sim.reconcile()  # the scheduler had its pass and placed nothing
    (event,) = unmet.events
    assert (event.reason, event.event_type) == (Reason.TARGET_UNMET, EventType.WARNING)
    assert event.data["desired_preemptible_gpus"] == 16
    assert event.data["allocated_preemptible_gpus"] == 0
    assert sim.cluster.target_met is False
    assert sim.reconcile().events == (), "still unmet: no repeat"
    sim.place(limit=1)
    assert sim.reconcile().events == (), "half-way: still unmet"
    sim.place()
    (met,) = sim.reconcile().events
    assert (met.reason, met.event_type) == (Reason.TARGET_MET, EventType.NORMAL)
    assert met.data == {
        "desired_preemptible_gpus": 16,
        "allocated_preemptible_gpus": 16,
        "pending_preemptible_gpus": 0,
    }
    assert sim.reconcile().events == (), "still met: no repeat"


def test_a_quick_refill_after_a_reclaim_is_silent() -> None:
    sim = Sim.start(desired=8)
    sim.reconcile()
    sim.place()
    assert [e.reason for e in sim.reconcile().events] == [Reason.TARGET_MET]
    sim.preempt("n1")
    sim.finish_drains()
    assert [e.reason for e in sim.reconcile().events] == [Reason.QUEUED]
    sim.place()
    assert sim.reconcile().events == ()


def test_a_zero_target_reports_nothing() -> None:
    sim = Sim.start(desired=0)
    assert sim.reconcile() == reconcile_cluster(sim.cluster, [], sim.now, new_node_ids=[])
    assert sim.reconcile().events == ()


def test_delete_drains_every_node_then_the_cluster_is_deleted() -> None:
    sim = Sim.start(desired=24, standard=1)
    sim.reconcile()
    sim.place(limit=2)  # n1, n2 ready, n3 pending, s0 standard ready
    plan = delete_cluster(sim.cluster, list(sim.nodes.values()), sim.now)
    sim.apply(plan)
    assert sim.cluster.status is ClusterStatus.DELETING
    assert [n.id for n in plan.removed] == ["n3"]
    assert [(d.node_id, d.reason) for d in plan.drains] == [
        ("n1", DRAIN_CLUSTER_DELETE),
        ("n2", DRAIN_CLUSTER_DELETE),
        ("s0", DRAIN_CLUSTER_DELETE),
    ]
    again = sim.reconcile()
    assert (again.drains, again.new_nodes, sim.cluster.status) == ((), (), ClusterStatus.DELETING)
    sim.finish_drains()
    done = sim.reconcile()
    assert sim.cluster.status is ClusterStatus.DELETED
    assert [e.reason for e in done.events] == [Reason.DELETED]
    assert sim.reconcile().events == ()
    with pytest.raises(IllegalTransition, match="from deleted to deleting"):
        delete_cluster(sim.cluster, [], sim.now)


def test_the_target_of_a_deleting_cluster_cannot_change() -> None:
    sim = Sim.start(desired=8)
    sim.apply(delete_cluster(sim.cluster, list(sim.nodes.values()), sim.now))
    with pytest.raises(Conflict, match="deleting"):
        update_target(sim.cluster, 16, now=sim.now)


def test_running_out_of_fresh_ids_is_a_caller_bug_said_plainly() -> None:
    cluster = create_cluster("c1", ClusterSpec(POOL, 8, 1, 16), 0)
    with pytest.raises(ValueError, match="ran out"):
        reconcile_cluster(cluster, [], 0, new_node_ids=["only-one"])
    with pytest.raises(ValueError, match="already a node"):
        reconcile_cluster(cluster, [], 0, new_node_ids=["dup", "dup"])
