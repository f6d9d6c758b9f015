"""Clusters: standard nodes, never preempted, and a preemptible target refilled from the queue.

A cluster lives in one pool (region, GPU type). Its nodes are `gpus_per_node` GPUs each. Standard
nodes are on-demand requests, placed synchronously (`standard_node_requests`); preemptible nodes
are tickets in THE SAME pool queue as interruptible instances, so a cluster gets no better and no
worse place than anyone else.

This module holds the cluster record, what a reconcile returns (`ClusterPlan`), validation,
creation and target changes, and the helpers that make nodes. The reconcile itself — what moves
a cluster toward its target, and how a reclaimed node keeps its queue place — is
`core.cluster_reconcile`.
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
    NodeState,
    Taint,
    allocated_preemptible_gpus,
    convert_node_class,
    node_labels,
    node_taints,
    pending_preemptible_gpus,
)
from lowcostgpu.core.state import Request, Ticket
from lowcostgpu.domain.capacity import CapacityClass, PoolKey, Timestamp
from lowcostgpu.domain.errors import Conflict, InvalidRequest
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import ClusterStatus, NodeStatus

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
    "new_node",
    "node_labels",
    "node_taints",
    "pending_preemptible_gpus",
    "standard_node_requests",
    "update_target",
    "validate_cluster_spec",
    "validate_target",
]


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
    return cluster_event(
        new, new.id, Reason.TARGET_CHANGED, message, now, {"from": before, "to": after}
    )


def standard_node_requests(
    cluster: ClusterState,
    new_node_ids: Iterable[str] | None = None,
    nodes: Sequence[NodeState] = (),
) -> list[Request]:
    """On-demand requests for the standard nodes the cluster lacks (all of them at creation)."""
    live = [n for n in nodes if not n.preemptible and n.status is not NodeStatus.REMOVED]
    ids = iter(fresh_node_ids(cluster) if new_node_ids is None else new_node_ids)
    return [
        Request(next_node_id(ids, nodes), cluster.pool, cluster.gpus_per_node, cluster.account_id)
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


def next_node_id(ids: Iterator[str], existing: Sequence[NodeState]) -> str:
    """The next id from `ids`; a source that runs out or repeats a node's id is a caller's bug."""
    try:
        node_id = next(ids)
    except StopIteration:
        raise ValueError("new_node_ids ran out: pass an id source with enough fresh ids") from None
    if any(n.id == node_id for n in existing):
        raise ValueError(f"new_node_ids gave {node_id!r}, which is already a node of this cluster")
    return node_id


def cluster_event(
    cluster: ClusterState,
    object_id: str,
    reason: Reason,
    message: str,
    now: Timestamp,
    data: dict[str, int] | None = None,
) -> EmitEvent:
    """An event on the cluster itself or on one of its nodes (`object_id`), in its account."""
    kind = "cluster" if object_id == cluster.id else "node"
    return EmitEvent(kind, object_id, reason, message, now, cluster.account_id, data or {})
