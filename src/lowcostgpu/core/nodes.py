"""Cluster nodes: one record (`NodeState`) and what is derived from it.

A node is a subject of the scheduler like an instance: a standard node is an on-demand placement,
a preemptible node a ticket in its pool's queue and then an allocation that can be reclaimed. Its
state machine over `NODE_TRANSITIONS` (`node_step`, its drain by the shared rules of
`core.drain`) is `core.node_lifecycle`'s. Labels, taints and the refusal of in-place class
conversion are properties of the node, so they live here too.

Why one record: the queue place (`enqueued_at`, inherited by a replacement), the placement, the
drain and the billing times all describe the same node, and the store keeps exactly this record;
the fleet snapshot (its ticket or its allocation) is derived from it (`ticket_for_node`,
`allocation_of_node`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, NoReturn

from lowcostgpu.core.drain import DEFAULT_GRACE_PERIOD_S, check_grace_period
from lowcostgpu.core.snapshot import placed_at
from lowcostgpu.core.state import Ticket
from lowcostgpu.domain.capacity import Allocation, CapacityClass, PoolKey, Timestamp
from lowcostgpu.domain.errors import Conflict, InvalidRequest
from lowcostgpu.domain.status import NodeStatus

DRAIN_PREEMPTED: Final = "preempted"  # reclaimed for on-demand work: owed a replacement
DRAIN_SCALE_DOWN: Final = "scale-down"  # the target was lowered
DRAIN_CLUSTER_DELETE: Final = "cluster-delete"  # the cluster is being deleted (standard nodes too)
COMPUTE_CLASS_LABEL: Final = "lowcostgpu.io/compute-class"
CLUSTER_LABEL: Final = "lowcostgpu.io/cluster"

_N = NodeStatus


@dataclass(frozen=True, slots=True)
class Taint:
    """A Kubernetes-style taint: only pods that tolerate it are scheduled on the node."""

    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}"


PREEMPTIBLE_TAINT: Final = Taint("lowcostgpu.io/preemptible", "true", "NoSchedule")


@dataclass(frozen=True, slots=True)
class NodeNaming:
    """The label keys and the taint a cluster node carries, as its users see them (the API's
    view of a node); on Kubernetes the operator chooses them (`KubeNames.naming`)."""

    cluster_label: str = CLUSTER_LABEL
    compute_class_label: str = COMPUTE_CLASS_LABEL
    preemptible_taint: Taint = PREEMPTIBLE_TAINT


DEFAULT_NAMING: Final = NodeNaming()


@dataclass(frozen=True, slots=True)
class NodeState:
    """A cluster node. GPU billing runs from `started_at` (ready) to `billed_until` (the notice).

    `enqueued_at` is its queue place (a replacement inherits the reclaimed node's);
    `last_interrupted_at` is the reclaim a replacement makes up for (victim choice's history).
    `drain_reason` is one of `DRAIN_PREEMPTED`, `DRAIN_SCALE_DOWN`, `DRAIN_CLUSTER_DELETE`.
    """

    id: str
    cluster_id: str
    account_id: str
    pool: PoolKey
    gpus: int
    capacity_class: CapacityClass
    status: NodeStatus = NodeStatus.PENDING
    grace_period_s: int = DEFAULT_GRACE_PERIOD_S
    created_at: Timestamp = 0
    enqueued_at: Timestamp | None = None
    replaces: str | None = None
    last_interrupted_at: Timestamp | None = None
    allocation_id: str | None = None
    host_id: str | None = None
    gpu_indices: tuple[int, ...] = ()
    waiting_for: frozenset[str] = field(default_factory=frozenset)
    started_at: Timestamp | None = None
    billed_until: Timestamp | None = None
    notice_at: Timestamp | None = None
    deadline: Timestamp | None = None
    signal_sent_at: Timestamp | None = None  # the drain's SIGTERM, once it moved the deadline
    drain_reason: str | None = None
    preempted_for: str | None = None
    removed_at: Timestamp | None = None

    def __post_init__(self) -> None:
        check_grace_period(self.grace_period_s, subject=f"node {self.id}")
        if self.gpus < 1:
            raise InvalidRequest(f"node {self.id}: gpus must be ≥ 1, got {self.gpus}")

    @property
    def preemptible(self) -> bool:
        return self.capacity_class.preemptible

    @property
    def queued(self) -> bool:
        """A preemptible node waiting for the queue to place it (it has a ticket)."""
        return self.status is _N.PENDING and self.preemptible and self.allocation_id is None

    @property
    def place(self) -> Timestamp:
        """Its place in the queue: the inherited enqueue time, else its creation."""
        return self.enqueued_at if self.enqueued_at is not None else self.created_at


# --- derived views: queue ticket, allocation, labels --------------------------------------------


def ticket_for_node(node: NodeState) -> Ticket:
    """The ticket of a queued preemptible node, in the same queue as interruptible instances."""
    return Ticket(
        subject_id=node.id,
        pool=node.pool,
        gpus=node.gpus,
        enqueued_at=node.place,
        account_id=node.account_id,
        last_interrupted_at=node.last_interrupted_at,
    )


def allocation_of_node(node: NodeState) -> Allocation:
    """The allocation a placed node holds: draining once cordoned, a victim like any other."""
    assert node.allocation_id is not None and node.host_id is not None
    return Allocation(
        id=node.allocation_id,
        subject_id=node.id,
        host_id=node.host_id,
        pool=node.pool,
        gpu_indices=frozenset(node.gpu_indices),
        capacity_class=node.capacity_class,
        started_at=placed_at(node.allocation_id),
        account_id=node.account_id,
        last_interrupted_at=node.last_interrupted_at,
        draining=node.status is _N.CORDONED,
        waits_for=node.waiting_for,
    )


def node_labels(node: NodeState, naming: NodeNaming = DEFAULT_NAMING) -> dict[str, str]:
    return {
        naming.compute_class_label: node.capacity_class.compute_class_label,
        naming.cluster_label: node.cluster_id,
    }


def node_taints(node: NodeState, naming: NodeNaming = DEFAULT_NAMING) -> tuple[Taint, ...]:
    """Preemptible nodes are tainted so that only pods that tolerate preemption land there."""
    return (naming.preemptible_taint,) if node.preemptible else ()


def convert_node_class(node: NodeState, new_class: CapacityClass) -> NoReturn:
    """Nodes never change class in place: say so, and say what to do instead."""
    have = node.capacity_class.compute_class_label
    want = new_class.compute_class_label
    if have == want:
        raise Conflict(f"node {node.id} is already a {have} node", node_id=node.id)
    how = (
        "raise the cluster's desired_preemptible_gpus"
        if new_class.preemptible
        else "add a standard node to the cluster"
    )
    raise Conflict(
        f"node {node.id} is a {have} node and cannot be converted to {want} in place",
        hint=f"{how}, then remove this node once the new one is ready",
        node_id=node.id,
        capacity_class=have,
    )


def allocated_preemptible_gpus(nodes: Iterable[NodeState]) -> int:
    """GPUs of live preemptible nodes: ready, not cordoned or pending."""
    return sum(n.gpus for n in nodes if n.preemptible and n.status is _N.READY)


def pending_preemptible_gpus(nodes: Iterable[NodeState]) -> int:
    return sum(n.gpus for n in nodes if n.preemptible and n.status is _N.PENDING)
