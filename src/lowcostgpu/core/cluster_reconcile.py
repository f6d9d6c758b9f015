"""Cluster reconcile: move a cluster toward its preemptible target, or wind it down.

`reconcile_cluster` compares the target (`desired_preemptible_gpus`) with what is live (ready)
and pending (queued), and returns a `ClusterPlan`: new node tickets, pending nodes to take out of
the queue, ready nodes to drain, events. `delete_cluster` drains every node, standard ones too.
Both are pure: they decide, the shell (`core.cluster_engine`, the engine's `Work`) acts. The
cluster record, its validation and its node-making helpers are in `core.clusters`; this module is
the control loop on top of them, kept apart because it is where the queue-place rules live.

Replacement keeps its place. A preemptible node removed because it was reclaimed is replaced
without any request, and the replacement ticket keeps the removed node's `enqueued_at` (the same
rule as a requeued instance: reclaimed work is not sent to the back of the line). Only a lowered
target forgives that debt: preempted nodes removed before the last lowering are not owed a place.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

from lowcostgpu.core.clusters import (
    ClusterPlan,
    ClusterState,
    NodeDrain,
    cluster_event,
    fresh_node_ids,
    new_node,
    next_node_id,
)
from lowcostgpu.core.effects import EmitEvent
from lowcostgpu.core.node_lifecycle import Leave, node_step
from lowcostgpu.core.nodes import (
    DRAIN_CLUSTER_DELETE,
    DRAIN_PREEMPTED,
    DRAIN_SCALE_DOWN,
    NodeState,
    ticket_for_node,
)
from lowcostgpu.domain.capacity import CapacityClass, Timestamp
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import (
    CLUSTER_TRANSITIONS,
    ClusterStatus,
    NodeStatus,
    check_transition,
)

_PREEMPTIBLE = CapacityClass.INTERRUPTIBLE


def reconcile_cluster(
    cluster: ClusterState,
    nodes: Sequence[NodeState],
    now: Timestamp,
    *,
    new_node_ids: Iterable[str] | None = None,
) -> ClusterPlan:
    """Move the cluster toward its target. Pass every live node of the cluster (removed ones
    may be passed too). New nodes take `new_node_ids`, else ids from the cluster's serial.

    Best called after the scheduler's pass: a node still pending then could not be placed, which
    is what TargetUnmet reports (a ticket created by this call has not had its chance yet).
    """
    mine = [n for n in nodes if n.cluster_id == cluster.id]
    if cluster.status is ClusterStatus.DELETED:
        return ClusterPlan(cluster)
    if cluster.status is ClusterStatus.DELETING:
        return _wind_down(cluster, mine, now)
    ready = [n for n in mine if n.preemptible and n.status is NodeStatus.READY]
    pending = [n for n in mine if n.preemptible and n.status is NodeStatus.PENDING]
    wanted = cluster.desired_preemptible_gpus // cluster.gpus_per_node
    plan = ClusterPlan(cluster)
    ids = iter(fresh_node_ids(cluster) if new_node_ids is None else new_node_ids)
    if len(ready) + len(pending) < wanted:
        plan = _grow(plan, mine, wanted - len(ready) - len(pending), now, ids)
    elif len(ready) + len(pending) > wanted:
        plan = _shrink(plan, ready, pending, len(ready) + len(pending) - wanted, now)
    return _report_target(plan, ready, pending, now)


def delete_cluster(
    cluster: ClusterState, nodes: Sequence[NodeState], now: Timestamp
) -> ClusterPlan:
    """ACTIVE → DELETING: every node is drained, standard ones too; DELETED once none is left."""
    if cluster.status is ClusterStatus.ACTIVE:
        status = check_transition(
            CLUSTER_TRANSITIONS, cluster.status, ClusterStatus.DELETING, subject=cluster.id
        )
        cluster = replace(cluster, status=status)
    elif cluster.status is ClusterStatus.DELETED:
        check_transition(
            CLUSTER_TRANSITIONS, cluster.status, ClusterStatus.DELETING, subject=cluster.id
        )
    return _wind_down(cluster, [n for n in nodes if n.cluster_id == cluster.id], now)


def _grow(
    plan: ClusterPlan, mine: list[NodeState], missing: int, now: Timestamp, ids: Iterator[str]
) -> ClusterPlan:
    cluster = plan.cluster
    owed = iter(_owed_replacements(cluster, mine))
    new_nodes: list[NodeState] = []
    for _ in range(missing):
        node_id = next_node_id(ids, [*mine, *new_nodes])
        debt = next(owed, None)
        enqueued_at = None if debt is None else debt.place
        new_nodes.append(
            new_node(node_id, cluster, _PREEMPTIBLE, now, enqueued_at=enqueued_at, replaces=debt)
        )
    events = tuple(
        cluster_event(cluster, n.id, Reason.QUEUED, _queued_message(cluster, n), now)
        for n in new_nodes
    )
    cluster = replace(cluster, node_serial=cluster.node_serial + len(new_nodes))
    return replace(
        plan,
        cluster=cluster,
        new_nodes=tuple(new_nodes),
        tickets=tuple(ticket_for_node(n) for n in new_nodes),
        effects=plan.effects + events,
    )


def _owed_replacements(cluster: ClusterState, mine: list[NodeState]) -> list[NodeState]:
    """Preempted nodes (draining or gone) not yet replaced, oldest queue place first.

    The replacement is queued at T+0 of the reclaim, not when the node is finally removed, so the
    cluster is back in line while its old node drains.
    """
    replaced = {n.replaces for n in mine if n.replaces is not None}
    owed = [
        n
        for n in mine
        if n.preemptible
        and n.status in (NodeStatus.CORDONED, NodeStatus.REMOVED)
        and n.drain_reason == DRAIN_PREEMPTED
        and _drained_at(n) >= cluster.replacements_since
        and n.id not in replaced
    ]
    return sorted(owed, key=lambda n: (n.place, n.id))


def _drained_at(node: NodeState) -> Timestamp:
    for at in (node.notice_at, node.removed_at):
        if at is not None:
            return at
    return node.created_at


def _shrink(
    plan: ClusterPlan, ready: list[NodeState], pending: list[NodeState], excess: int, now: Timestamp
) -> ClusterPlan:
    """Pending nodes leave the queue first (last in line first), then the newest ready ones."""
    by_queue = sorted(pending, key=lambda n: (n.place, n.id), reverse=True)
    by_age = sorted(ready, key=lambda n: (n.created_at, n.id), reverse=True)
    chosen = (by_queue + by_age)[:excess]
    steps = [
        node_step(n, Leave(DRAIN_SCALE_DOWN), now) for n in chosen if n.status is NodeStatus.PENDING
    ]
    drains = tuple(
        NodeDrain(n.id, DRAIN_SCALE_DOWN) for n in chosen if n.status is NodeStatus.READY
    )
    return replace(
        plan,
        removed=tuple(s.state for s in steps),
        drains=drains,
        effects=plan.effects + tuple(e for s in steps for e in s.effects),
    )


def _report_target(
    plan: ClusterPlan, ready: list[NodeState], pending: list[NodeState], now: Timestamp
) -> ClusterPlan:
    """TargetMet / TargetUnmet, only when the reported condition changes."""
    cluster = plan.cluster
    draining = {d.node_id for d in plan.drains}
    allocated = sum(n.gpus for n in ready if n.id not in draining)
    desired = cluster.desired_preemptible_gpus
    still_queued = [n for n in pending if n.id not in plan.dequeued_ids]
    data = {
        "desired_preemptible_gpus": desired,
        "allocated_preemptible_gpus": allocated,
        "pending_preemptible_gpus": sum(n.gpus for n in still_queued)
        + sum(n.gpus for n in plan.new_nodes),
    }
    if allocated >= desired:
        if cluster.target_met is False or (cluster.target_met is None and desired > 0):
            message = f"preemptible target met: {allocated} of {desired} GPUs allocated"
            return _with_target(
                plan,
                True,
                cluster_event(cluster, cluster.id, Reason.TARGET_MET, message, now, data),
            )
        return _with_target(plan, True, None)
    if still_queued and cluster.target_met is not False:
        message = (
            f"preemptible target unmet: {allocated} of {desired} GPUs allocated; "
            f"{cluster.pool} has no free capacity now, the queue will refill it as capacity frees"
        )
        return _with_target(
            plan, False, cluster_event(cluster, cluster.id, Reason.TARGET_UNMET, message, now, data)
        )
    return plan


def _with_target(plan: ClusterPlan, met: bool, event: EmitEvent | None) -> ClusterPlan:
    effects = plan.effects + ((event,) if event is not None else ())
    return replace(plan, cluster=replace(plan.cluster, target_met=met), effects=effects)


def _wind_down(cluster: ClusterState, mine: list[NodeState], now: Timestamp) -> ClusterPlan:
    """Drain every node of a deleting cluster; DELETED once no node is left."""
    pending = sorted((n for n in mine if n.status is NodeStatus.PENDING), key=lambda n: n.id)
    ready = [n for n in mine if n.status is NodeStatus.READY]
    cordoned = [n for n in mine if n.status is NodeStatus.CORDONED]
    steps = [node_step(n, Leave(DRAIN_CLUSTER_DELETE), now) for n in pending]
    drains = tuple(NodeDrain(n.id, DRAIN_CLUSTER_DELETE) for n in sorted(ready, key=lambda n: n.id))
    plan = ClusterPlan(
        cluster,
        removed=tuple(s.state for s in steps),
        drains=drains,
        effects=tuple(e for s in steps for e in s.effects),
    )
    if ready or cordoned:
        return plan
    status = check_transition(
        CLUSTER_TRANSITIONS, cluster.status, ClusterStatus.DELETED, subject=cluster.id
    )
    event = cluster_event(
        cluster, cluster.id, Reason.DELETED, f"cluster {cluster.id} deleted: no node left", now
    )
    return replace(plan, cluster=replace(cluster, status=status), effects=(*plan.effects, event))


def _queued_message(cluster: ClusterState, node: NodeState) -> str:
    gpus = f"{node.gpus} × {cluster.pool.gpu_type}"
    text = f"preemptible node {node.id} ({gpus}) queued in {cluster.pool}"
    if node.replaces is None:
        return text
    return f"{text}, replacing reclaimed node {node.replaces} at its original place in the queue"
