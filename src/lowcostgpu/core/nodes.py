"""Cluster nodes: one record (`NodeState`) and one state machine over `NODE_TRANSITIONS`.

A node is a subject of the scheduler like an instance: a standard node is an on-demand placement,
a preemptible node a ticket in its pool's queue and then an allocation that can be reclaimed. Its
drain follows the shared rules of `core.drain` (T+0 cordon, notice and SIGTERM; removal when its
pods are gone or at the deadline). Labels, taints and the refusal of in-place class conversion are
properties of the node, so they live here too.

Why one record: the queue place (`enqueued_at`, inherited by a replacement), the placement, the
drain and the billing times all describe the same node, and the store keeps exactly this record;
the fleet snapshot (its ticket or its allocation) is derived from it (`ticket_for_node`,
`allocation_of_node`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Final, NoReturn

from lowcostgpu.core.drain import (
    DEFAULT_GRACE_PERIOD_S,
    DeadlineCheck,
    DrainWindow,
    Placed,
    Reclaimed,
    SignalSent,
    Step,
    StopRequested,
    VictimReleased,
    WorkloadExited,
    check_grace_period,
    deadline_due,
    drain_data,
    open_drain,
    preempted_message,
    signal_stamp,
)
from lowcostgpu.core.effects import (
    AddNode,
    CordonNode,
    Effect,
    EmitEvent,
    KillWorkload,
    ReleaseAllocation,
    RemoveNode,
    SignalWorkload,
)
from lowcostgpu.core.snapshot import placed_at
from lowcostgpu.core.state import Ticket
from lowcostgpu.domain.capacity import Allocation, CapacityClass, PoolKey, Timestamp
from lowcostgpu.domain.errors import Conflict, InvalidRequest
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import NODE_TRANSITIONS, NodeStatus, check_transition

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


@dataclass(frozen=True, slots=True)
class Leave:
    """The node leaves its cluster (target lowered, cluster deleted): drained, not preempted."""

    reason: str = DRAIN_SCALE_DOWN


NodeEvent = (
    Placed
    | VictimReleased
    | Reclaimed
    | Leave
    | StopRequested
    | WorkloadExited
    | SignalSent
    | DeadlineCheck
)


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


# --- the state machine ------------------------------------------------------------------------


def node_step(state: NodeState, event: NodeEvent, now: Timestamp) -> Step[NodeState]:
    """Advance a node by one event; unknown-but-harmless reports (a late exit) change nothing."""
    match event:
        case Placed():
            s, fx = _placed(state, event, now)
        case VictimReleased():
            s, fx = _victim_released(state, event, now)
        case Reclaimed():
            s, fx = _reclaimed(state, event, now)
        case Leave():
            s, fx = _leave(state, event.reason, now)
        case StopRequested():
            s, fx = _leave(state, DRAIN_SCALE_DOWN, now)
        case WorkloadExited():
            s, fx = _gone(state, now) if state.status is _N.CORDONED else (state, [])
        case SignalSent():
            s, fx = _signal_sent(state, event), []
        case DeadlineCheck():
            s, fx = _deadline(state, now)
        case _:
            raise InvalidRequest(f"node {state.id} does not take {type(event).__name__} events")
    wake = s.deadline if s.status is _N.CORDONED else None
    return Step(state=s, effects=tuple(fx), wake_at=wake)


_Result = tuple[NodeState, list[Effect]]


def _event(s: NodeState, reason: Reason, message: str, now: Timestamp, /, **data: Any) -> EmitEvent:
    return EmitEvent("node", s.id, reason, message, now, s.account_id, data)


def _to(s: NodeState, target: NodeStatus) -> NodeState:
    status = check_transition(NODE_TRANSITIONS, s.status, target, subject=f"node {s.id}")
    return replace(s, status=status)


def _placed(s: NodeState, ev: Placed, now: Timestamp) -> _Result:
    if s.status is not _N.PENDING or s.allocation_id is not None:
        _to(s, _N.READY)  # raises with the table's hint unless PENDING
        raise Conflict(
            f"node {s.id} is already placed on {s.host_id}",
            hint="a placement is given once; replacement capacity is a new node",
        )
    s = replace(
        s,
        allocation_id=ev.allocation_id,
        host_id=ev.host_id,
        gpu_indices=tuple(sorted(ev.gpu_indices)),
        waiting_for=frozenset(ev.waits_for),
    )
    return (s, []) if s.waiting_for else _ready(s, now)


def _victim_released(s: NodeState, ev: VictimReleased, now: Timestamp) -> _Result:
    if s.status is not _N.PENDING or ev.allocation_id not in s.waiting_for:
        return s, []
    s = replace(s, waiting_for=s.waiting_for - {ev.allocation_id})
    return (s, []) if s.waiting_for else _ready(s, now)


def _ready(s: NodeState, now: Timestamp) -> _Result:
    allocation_id, host_id = s.allocation_id, s.host_id
    assert allocation_id is not None and host_id is not None
    s = replace(_to(s, _N.READY), started_at=now)
    label = s.capacity_class.compute_class_label
    return s, [
        AddNode(s.id, s.cluster_id, allocation_id, host_id, s.gpu_indices, label),
        _event(
            s,
            Reason.NODE_ADDED,
            f"{label} node added on {s.host_id} with {s.gpus} GPU(s)",
            now,
            host_id=s.host_id,
            compute_class=label,
        ),
    ]


def _reclaimed(s: NodeState, ev: Reclaimed, now: Timestamp) -> _Result:
    if not s.preemptible:
        raise Conflict(
            f"node {s.id} is a standard node: standard nodes are never preempted",
            hint="reclaim only preemptible nodes",
        )
    window = open_drain(now, s.grace_period_s)
    s = _draining(_to(s, _N.CORDONED), window, DRAIN_PREEMPTED, ev.for_subject)
    shown = ev.shown_for_subject(s.account_id)
    data = drain_data(
        window, for_subject=shown, lost_gpu_s=ev.lost_gpu_s, reason=ev.reason, policy=ev.policy
    )
    message = preempted_message(
        window,
        who="its pods get ",
        save="finish",
        end="the node is removed",
        kept="the cluster keeps its preemptible target",
        then="a replacement node is queued at this node's place and joins when capacity frees",
    )
    return _signal(s, _event(s, Reason.PREEMPTED, message, now, **data), now)


def _leave(s: NodeState, reason: str, now: Timestamp) -> _Result:
    if s.status in (_N.CORDONED, _N.REMOVED):
        return s, []  # already leaving: a second request changes nothing
    if s.status is _N.PENDING:
        s = replace(s, drain_reason=reason)
        why = _why(reason)
        if s.queued:
            return _removed(s, now, f"pending node {s.id} left the queue: {why}")
        return _removed(s, now, f"pending node {s.id} removed before it was ready: {why}")
    window = open_drain(now, s.grace_period_s)
    s = _draining(_to(s, _N.CORDONED), window, reason, None)
    message = preempted_message(
        window,
        head=f"cordoned ({_why(reason)})",
        who="its pods get ",
        save="finish",
        end="the node is removed",
        kept="no new pod is scheduled on it",
        then="the cluster's other nodes keep running",
    )
    data = drain_data(window, for_subject=None, lost_gpu_s=0, reason=reason)
    return _signal(s, _event(s, Reason.CORDONED, message, now, **data), now)


def _draining(s: NodeState, window: DrainWindow, reason: str, for_subject: str | None) -> NodeState:
    return replace(
        s,
        notice_at=window.notice_at,
        deadline=window.deadline,
        billed_until=window.notice_at,
        drain_reason=reason,
        preempted_for=for_subject,
    )


def _signal(s: NodeState, notice: EmitEvent, now: Timestamp) -> _Result:
    """Cordon first, then the notice, then SIGTERM to the node's pods; grace 0 kills at once."""
    assert s.allocation_id is not None
    fx: list[Effect] = [CordonNode(s.id), notice, SignalWorkload(s.id, s.allocation_id)]
    if deadline_due(s.deadline, now):
        s, more = _deadline(s, now)
        fx += more
    return s, fx


def _signal_sent(s: NodeState, ev: SignalSent) -> NodeState:
    """The pods' SIGTERM really went out at `ev.at`: their grace counts from then."""
    if s.status is not _N.CORDONED or s.allocation_id != ev.allocation_id:
        return s
    moved = signal_stamp(s.deadline, s.signal_sent_at, s.grace_period_s, ev)
    return s if moved is None else replace(s, deadline=moved, signal_sent_at=ev.at)


def _deadline(s: NodeState, now: Timestamp) -> _Result:
    if s.status is not _N.CORDONED or not deadline_due(s.deadline, now):
        return s, []
    assert s.allocation_id is not None
    killed: list[Effect] = [
        KillWorkload(s.id, s.allocation_id),
        _event(
            s,
            Reason.KILLED,
            "grace period over and pods still running: they were killed (SIGKILL)",
            now,
        ),
    ]
    s, fx = _gone(s, now)
    return s, killed + fx


def _gone(s: NodeState, now: Timestamp) -> _Result:
    return _removed(s, now, f"node {s.id} removed after its drain ({_why(s.drain_reason)})")


def _why(drain_reason: str | None) -> str:
    """A drain reason in the customer's words."""
    words = {
        DRAIN_PREEMPTED: "reclaimed for on-demand work",
        DRAIN_SCALE_DOWN: "target lowered",
        DRAIN_CLUSTER_DELETE: "cluster deleted",
    }
    return words.get(drain_reason or "", drain_reason or "drained")


def _removed(s: NodeState, now: Timestamp, message: str) -> _Result:
    had = s.allocation_id
    s = replace(_to(s, _N.REMOVED), allocation_id=None, waiting_for=frozenset(), removed_at=now)
    fx: list[Effect] = [RemoveNode(s.id)] if s.started_at is not None else []
    if had is not None:
        fx.append(ReleaseAllocation(had))
    fx.append(_event(s, Reason.NODE_REMOVED, message, now, allocation_id=had))
    return s, fx
