"""Clusters: standard nodes, never preempted, and a preemptible target refilled from the queue.

A cluster lives in one pool (region, GPU type). Its nodes are `gpus_per_node` GPUs each. Standard
nodes are on-demand requests, placed synchronously (`standard_node_requests`); preemptible nodes
are tickets in THE SAME pool queue as interruptible instances, so a cluster gets no better and no
worse place than anyone else. `reconcile_cluster` compares the target (`desired_preemptible_gpus`)
with what is live (ready) and pending (queued), and returns a plan: new node tickets, pending nodes
to take out of the queue, ready nodes to drain, events. It is pure: it decides, the shell acts.

Replacement keeps its place. A preemptible node removed because it was reclaimed is replaced
without any request, and the replacement ticket keeps the removed node's `enqueued_at` (the same
rule as a requeued instance: reclaimed work is not sent to the back of the line). Only a lowered
target forgives that debt: preempted nodes removed before the last lowering are not owed a place.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import count

from lowcostgpu.core.drain import DEFAULT_GRACE_PERIOD_S, check_grace_period
from lowcostgpu.core.effects import Effect, EmitEvent
from lowcostgpu.core.nodes import (
    CLUSTER_LABEL,
    COMPUTE_CLASS_LABEL,
    DRAIN_CLUSTER_DELETE,
    DRAIN_PREEMPTED,
    DRAIN_SCALE_DOWN,
    PREEMPTIBLE_TAINT,
    Leave,
    NodeState,
    Taint,
    allocated_preemptible_gpus,
    convert_node_class,
    node_labels,
    node_step,
    node_taints,
    pending_preemptible_gpus,
    ticket_for_node,
)
from lowcostgpu.core.state import Request, Ticket
from lowcostgpu.domain.capacity import CapacityClass, PoolKey, Timestamp
from lowcostgpu.domain.errors import Conflict, InvalidRequest
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import (
    CLUSTER_TRANSITIONS,
    ClusterStatus,
    NodeStatus,
    check_transition,
)

__all__ = [  # the node vocabulary is re-exported: a cluster's API speaks it
    "CLUSTER_LABEL",
    "COMPUTE_CLASS_LABEL",
    "DRAIN_CLUSTER_DELETE",
    "DRAIN_PREEMPTED",
    "DRAIN_SCALE_DOWN",
    "PREEMPTIBLE_TAINT",
    "ClusterPlan",
    "ClusterSpec",
    "ClusterState",
    "NodeDrain",
    "NodeState",
    "Taint",
    "allocated_preemptible_gpus",
    "convert_node_class",
    "create_cluster",
    "delete_cluster",
    "new_node",
    "node_labels",
    "node_taints",
    "pending_preemptible_gpus",
    "reconcile_cluster",
    "standard_node_requests",
    "update_target",
    "validate_cluster_spec",
    "validate_target",
]

_PREEMPTIBLE = CapacityClass.INTERRUPTIBLE


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """What the user asks for: a pool, a node size, standard nodes and a preemptible target."""

    pool: PoolKey
    gpus_per_node: int
    standard_nodes: int = 1
    desired_preemptible_gpus: int = 0
    grace_period_s: int = DEFAULT_GRACE_PERIOD_S  # the nodes' drain (terminationGracePeriodSeconds)


@dataclass(frozen=True, slots=True)
class ClusterState:
    """A cluster as stored.

    `target_met` is the target condition last *reported* by an event: True (TargetMet), False
    (TargetUnmet), None (nothing reported since the target was raised or the cluster created), so
    that repeated reconciles never repeat an event. `replacements_since`: preempted nodes removed
    before it (the last lowering of the target) are not replaced with their old queue place.
    `node_serial` makes node ids without an id source, so that the pure engine can name them.
    """

    id: str
    spec: ClusterSpec
    created_at: Timestamp
    account_id: str = ""
    status: ClusterStatus = ClusterStatus.ACTIVE
    target_met: bool | None = None
    replacements_since: Timestamp = 0
    node_serial: int = 0  # nodes created so far: the next node is `<cluster id>-n<serial + 1>`

    @property
    def pool(self) -> PoolKey:
        return self.spec.pool

    @property
    def gpus_per_node(self) -> int:
        return self.spec.gpus_per_node

    @property
    def desired_preemptible_gpus(self) -> int:
        return self.spec.desired_preemptible_gpus


@dataclass(frozen=True, slots=True)
class NodeDrain:
    """Drain a ready node (cordon, SIGTERM, grace, remove): the lifecycle carries it out."""

    node_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    """What a reconcile decided. `removed` are pending nodes, now REMOVED: drop their tickets
    (and release the allocation a standard node still waiting for its victims held: the
    `ReleaseAllocation` is among `effects`)."""

    cluster: ClusterState
    new_nodes: tuple[NodeState, ...] = ()
    tickets: tuple[Ticket, ...] = ()
    removed: tuple[NodeState, ...] = ()
    drains: tuple[NodeDrain, ...] = ()
    effects: tuple[Effect, ...] = ()

    @property
    def events(self) -> tuple[EmitEvent, ...]:
        return tuple(e for e in self.effects if isinstance(e, EmitEvent))

    @property
    def dequeued_ids(self) -> tuple[str, ...]:
        return tuple(node.id for node in self.removed)


# --- validation and creation -----------------------------------------------------------------


def validate_target(desired_preemptible_gpus: int, gpus_per_node: int) -> int:
    """A target is ≥ 0 and a whole number of nodes; a refusal names the nearest valid values."""
    desired = desired_preemptible_gpus
    if isinstance(desired, bool) or not isinstance(desired, int):
        raise InvalidRequest(
            f"desired_preemptible_gpus must be a whole number of GPUs, got {desired!r}"
        )
    if desired < 0:
        raise InvalidRequest(
            f"desired_preemptible_gpus must be ≥ 0, got {desired}",
            hint="the nearest valid value is 0 (no preemptible nodes)",
        )
    if desired % gpus_per_node:
        lower = desired - desired % gpus_per_node
        raise InvalidRequest(
            f"desired_preemptible_gpus must be a multiple of the node size ({gpus_per_node} GPUs),"
            f" got {desired}",
            hint=f"the nearest valid values are {lower} and {lower + gpus_per_node}",
        )
    return desired


def validate_cluster_spec(spec: ClusterSpec) -> ClusterSpec:
    """Refuse a spec that could not be honoured, saying what to ask for instead."""
    size = spec.gpus_per_node
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidRequest(
            f"gpus_per_node must be a whole number ≥ 1, got {size!r}",
            hint="use the GPUs of a whole host (e.g. 8) or a part of one",
        )
    standard = spec.standard_nodes
    if isinstance(standard, bool) or not isinstance(standard, int) or standard < 1:
        raise InvalidRequest(
            f"a cluster needs at least one standard node, got standard_nodes={standard!r}",
            hint="standard nodes are never preempted and run the cluster's critical components;"
            " ask for standard_nodes ≥ 1 and put interruptible work on preemptible nodes",
        )
    validate_target(spec.desired_preemptible_gpus, size)
    check_grace_period(spec.grace_period_s, subject="cluster")
    return spec


def create_cluster(
    cluster_id: str, spec: ClusterSpec, now: Timestamp, *, account_id: str = ""
) -> ClusterState:
    """A new ACTIVE cluster; a zero target counts as met (there is nothing to report)."""
    validate_cluster_spec(spec)
    met = True if spec.desired_preemptible_gpus == 0 else None
    return ClusterState(cluster_id, spec, now, account_id, target_met=met, replacements_since=now)


def update_target(cluster: ClusterState, desired: int, *, now: Timestamp) -> ClusterState:
    """Change the preemptible target; the next reconcile scales toward it."""
    if cluster.status is not ClusterStatus.ACTIVE:
        raise Conflict(
            f"cluster {cluster.id} is {cluster.status}; its target cannot change",
            hint="create a new cluster",
        )
    validate_target(desired, cluster.gpus_per_node)
    spec = replace(cluster.spec, desired_preemptible_gpus=desired)
    if desired > cluster.desired_preemptible_gpus:
        return replace(cluster, spec=spec, target_met=None)
    if desired < cluster.desired_preemptible_gpus:
        return replace(cluster, spec=spec, replacements_since=now)
    return cluster


def target_changed(old: ClusterState, new: ClusterState, now: Timestamp) -> EmitEvent | None:
    """`TargetChanged`, so that the target's history can be read back from events."""
    before, after = old.desired_preemptible_gpus, new.desired_preemptible_gpus
    if before == after:
        return None
    message = f"preemptible target changed from {before} to {after} GPUs"
    return _event(new, new.id, Reason.TARGET_CHANGED, message, now, {"from": before, "to": after})


def standard_node_requests(
    cluster: ClusterState,
    new_node_ids: Iterable[str] | None = None,
    nodes: Sequence[NodeState] = (),
) -> list[Request]:
    """On-demand requests for the standard nodes the cluster lacks (all of them at creation)."""
    live = [n for n in nodes if not n.preemptible and n.status is not NodeStatus.REMOVED]
    ids = iter(fresh_node_ids(cluster) if new_node_ids is None else new_node_ids)
    return [
        Request(_next_id(ids, nodes), cluster.pool, cluster.gpus_per_node, cluster.account_id)
        for _ in range(cluster.spec.standard_nodes - len(live))
    ]


def new_node(
    node_id: str,
    cluster: ClusterState,
    capacity_class: CapacityClass,
    now: Timestamp,
    *,
    enqueued_at: Timestamp | None = None,
    replaces: NodeState | None = None,
) -> NodeState:
    """A PENDING node; a replacement inherits the reclaimed node's queue place and history."""
    return NodeState(
        id=node_id,
        cluster_id=cluster.id,
        account_id=cluster.account_id,
        pool=cluster.pool,
        gpus=cluster.gpus_per_node,
        capacity_class=capacity_class,
        grace_period_s=cluster.spec.grace_period_s,
        created_at=now,
        enqueued_at=now if enqueued_at is None else enqueued_at,
        replaces=None if replaces is None else replaces.id,
        last_interrupted_at=None if replaces is None else replaces.notice_at,
    )


def fresh_node_ids(cluster: ClusterState) -> Iterator[str]:
    """The ids of the cluster's next nodes, from its serial (no id source in the pure core)."""
    return (f"{cluster.id}-n{k}" for k in count(cluster.node_serial + 1))


# --- reconcile -------------------------------------------------------------------------------


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
        node_id = _next_id(ids, [*mine, *new_nodes])
        debt = next(owed, None)
        enqueued_at = None if debt is None else debt.place
        new_nodes.append(
            new_node(node_id, cluster, _PREEMPTIBLE, now, enqueued_at=enqueued_at, replaces=debt)
        )
    events = tuple(
        _event(cluster, n.id, Reason.QUEUED, _queued_message(cluster, n), now) for n in new_nodes
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
                plan, True, _event(cluster, cluster.id, Reason.TARGET_MET, message, now, data)
            )
        return _with_target(plan, True, None)
    if still_queued and cluster.target_met is not False:
        message = (
            f"preemptible target unmet: {allocated} of {desired} GPUs allocated; "
            f"{cluster.pool} has no free capacity now, the queue will refill it as capacity frees"
        )
        return _with_target(
            plan, False, _event(cluster, cluster.id, Reason.TARGET_UNMET, message, now, data)
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
    event = _event(
        cluster, cluster.id, Reason.DELETED, f"cluster {cluster.id} deleted: no node left", now
    )
    return replace(plan, cluster=replace(cluster, status=status), effects=(*plan.effects, event))


def _next_id(ids: Iterator[str], existing: Sequence[NodeState]) -> str:
    try:
        node_id = next(ids)
    except StopIteration:
        raise ValueError("new_node_ids ran out: pass an id source with enough fresh ids") from None
    if any(n.id == node_id for n in existing):
        raise ValueError(f"new_node_ids gave {node_id!r}, which is already a node of this cluster")
    return node_id


def _queued_message(cluster: ClusterState, node: NodeState) -> str:
    gpus = f"{node.gpus} × {cluster.pool.gpu_type}"
    text = f"preemptible node {node.id} ({gpus}) queued in {cluster.pool}"
    if node.replaces is None:
        return text
    return f"{text}, replacing reclaimed node {node.replaces} at its original place in the queue"


def _event(
    cluster: ClusterState,
    object_id: str,
    reason: Reason,
    message: str,
    now: Timestamp,
    data: dict[str, int] | None = None,
) -> EmitEvent:
    kind = "cluster" if object_id == cluster.id else "node"
    return EmitEvent(kind, object_id, reason, message, now, cluster.account_id, data or {})
