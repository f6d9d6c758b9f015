"""The drain sequence shared by instances and cluster nodes, and the node state machine.

T+0: notice (SIGTERM, `Preempted` or `Stopping`/`Cordoned`), GPU billing stops. T+grace: SIGKILL
for whatever still runs. The timing rules live here once (`open_drain`, `deadline_due`,
`drain_data`) so that an instance and a node can never disagree about when a deadline falls due.

Like a Kopf handler, a step never sleeps: it returns `wake_at`, the time at which the shell must
call again with `DeadlineCheck`. Durable deadlines live in the store, not in a sleeping task.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any, Final, Generic, Literal, TypeVar

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
from lowcostgpu.domain.capacity import CapacityClass, PoolKey, Timestamp
from lowcostgpu.domain.errors import Conflict, InvalidRequest
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import NODE_TRANSITIONS, NodeStatus, check_transition

DEFAULT_GRACE_PERIOD_S: Final = 300
MAX_GRACE_PERIOD_S: Final = 300

DrainReason = Literal["reclaim", "stop"]


# --- Input events (what happened; the shell reports them, the core decides) ---------------------


@dataclass(frozen=True, slots=True)
class Enqueued:
    """A new instance enters its pool's queue."""


@dataclass(frozen=True, slots=True)
class Placed:
    """The scheduler gave the subject these GPUs; `waits_for` must leave before it can start."""

    allocation_id: str
    host_id: str
    gpu_indices: Collection[int]
    waits_for: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class VictimReleased:
    """A draining allocation that a placement waited for has freed its GPUs."""

    allocation_id: str


@dataclass(frozen=True, slots=True)
class WorkloadStarted:
    """The runtime reports the workload process is up."""


@dataclass(frozen=True, slots=True)
class StartFailed:
    reason: str


@dataclass(frozen=True, slots=True)
class WorkloadExited:
    """The workload (for a node: its last pod) is gone; `exit_code` None when unknown."""

    exit_code: int | None = None


@dataclass(frozen=True, slots=True)
class CompletionReported:
    step: int | None = None


@dataclass(frozen=True, slots=True)
class CheckpointReported:
    step: int


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """T+0 of a reclaim, decided by the scheduler so that `for_subject` (on-demand) can run."""

    for_subject: str
    lost_gpu_s: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class StopRequested:
    """The user stops an instance, or a node leaves (target lowered, cluster deleted)."""


@dataclass(frozen=True, slots=True)
class ResumeRequested:
    pass


@dataclass(frozen=True, slots=True)
class DeleteRequested:
    pass


@dataclass(frozen=True, slots=True)
class DeadlineCheck:
    """The timer the shell set from a previous step's `wake_at` has fired."""


LifecycleEvent = (
    Enqueued
    | Placed
    | VictimReleased
    | WorkloadStarted
    | StartFailed
    | WorkloadExited
    | CompletionReported
    | CheckpointReported
    | Reclaimed
    | StopRequested
    | ResumeRequested
    | DeleteRequested
    | DeadlineCheck
)

S = TypeVar("S")


@dataclass(frozen=True)
class Step(Generic[S]):
    """The new state, what the shell must do, and when it must call again (None: no timer)."""

    state: S
    effects: tuple[Effect, ...] = ()
    wake_at: Timestamp | None = None


# --- The one drain timing helper --------------------------------------------------------------


def check_grace_period(grace_period_s: int, *, subject: str) -> None:
    """Refuse a grace period outside 0..300 s: the drain contract promises at most 300 s."""
    if not 0 <= grace_period_s <= MAX_GRACE_PERIOD_S:
        raise InvalidRequest(
            f"{subject}: grace_period_s must be between 0 and {MAX_GRACE_PERIOD_S} seconds, "
            f"got {grace_period_s}",
            hint=f"use a value from 0 to {MAX_GRACE_PERIOD_S} (default {DEFAULT_GRACE_PERIOD_S})",
        )


@dataclass(frozen=True, slots=True)
class DrainWindow:
    notice_at: Timestamp
    deadline: Timestamp


def open_drain(now: Timestamp, grace_period_s: int) -> DrainWindow:
    """T+0 is now; T+grace is the deadline at which SIGKILL is sent."""
    return DrainWindow(notice_at=now, deadline=now + grace_period_s)


def deadline_due(deadline: Timestamp | None, now: Timestamp) -> bool:
    """The deadline is due at `deadline` itself, not one second later."""
    return deadline is not None and now >= deadline


def drain_data(
    window: DrainWindow,
    *,
    for_subject: str | None,
    lost_gpu_s: int,
    reason: str,
    **extra: Any,
) -> dict[str, Any]:
    """The data of a `Preempted` event; the metadata endpoint answers the same times."""
    return {
        "notice_at": window.notice_at,
        "deadline": window.deadline,
        "grace_period_s": window.deadline - window.notice_at,
        "for_subject": for_subject,
        "lost_gpu_s": lost_gpu_s,
        "reason": reason,
        **extra,
    }


def interruption_notice(
    notice_at: Timestamp | None, deadline: Timestamp | None
) -> dict[str, Any] | None:
    """The metadata endpoint's answer: None (404) until a notice exists."""
    if notice_at is None or deadline is None:
        return None
    return {"action": "stop", "notice_at": notice_at, "deadline": deadline}


def preempted_message(for_subject: str, grace_period_s: int, reason: str) -> str:
    why = f" ({reason})" if reason else ""
    return (
        f"preempted for on-demand {for_subject}{why}: SIGTERM sent, "
        f"SIGKILL in {grace_period_s} s if still running"
    )


# --- Cluster nodes --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeState:
    """A cluster node. GPU billing runs from `started_at` (ready) to `billed_until` (the notice)."""

    id: str
    cluster_id: str
    account_id: str
    pool: PoolKey
    gpus: int
    capacity_class: CapacityClass
    status: NodeStatus = NodeStatus.PENDING
    grace_period_s: int = DEFAULT_GRACE_PERIOD_S
    allocation_id: str | None = None
    host_id: str | None = None
    gpu_indices: tuple[int, ...] = ()
    waiting_for: frozenset[str] = field(default_factory=frozenset)
    started_at: Timestamp | None = None
    billed_until: Timestamp | None = None
    notice_at: Timestamp | None = None
    deadline: Timestamp | None = None
    drain_reason: DrainReason | None = None
    preempted_for: str | None = None

    def __post_init__(self) -> None:
        check_grace_period(self.grace_period_s, subject=f"node {self.id}")


NodeEvent = Placed | VictimReleased | Reclaimed | StopRequested | WorkloadExited | DeadlineCheck


def node_step(state: NodeState, event: NodeEvent, now: Timestamp) -> Step[NodeState]:
    """Advance a node by one event; unknown-but-harmless reports (a late exit) change nothing."""
    match event:
        case Placed():
            s, fx = _node_placed(state, event, now)
        case VictimReleased():
            s, fx = _node_victim_released(state, event, now)
        case Reclaimed():
            s, fx = _node_reclaimed(state, event, now)
        case StopRequested():
            s, fx = _node_stop(state, now)
        case WorkloadExited():
            s, fx = _node_gone(state, now) if state.status is NodeStatus.CORDONED else (state, [])
        case DeadlineCheck():
            s, fx = _node_deadline(state, now)
        case _:
            raise InvalidRequest(f"node {state.id} does not take {type(event).__name__} events")
    wake = s.deadline if s.status is NodeStatus.CORDONED else None
    return Step(state=s, effects=tuple(fx), wake_at=wake)


_NodeResult = tuple[NodeState, list[Effect]]


def _node_event(
    s: NodeState, reason: Reason, message: str, now: Timestamp, /, **data: Any
) -> EmitEvent:
    return EmitEvent("node", s.id, reason, message, now, s.account_id, data)


def _node_to(s: NodeState, target: NodeStatus) -> NodeState:
    status = check_transition(NODE_TRANSITIONS, s.status, target, subject=f"node {s.id}")
    return replace(s, status=status)


def _node_placed(s: NodeState, ev: Placed, now: Timestamp) -> _NodeResult:
    if s.status is not NodeStatus.PENDING or s.allocation_id is not None:
        _node_to(s, NodeStatus.READY)  # raises with the table's hint unless PENDING
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
    return (s, []) if s.waiting_for else _node_ready(s, now)


def _node_victim_released(s: NodeState, ev: VictimReleased, now: Timestamp) -> _NodeResult:
    if s.status is not NodeStatus.PENDING or ev.allocation_id not in s.waiting_for:
        return s, []
    s = replace(s, waiting_for=s.waiting_for - {ev.allocation_id})
    return (s, []) if s.waiting_for else _node_ready(s, now)


def _node_ready(s: NodeState, now: Timestamp) -> _NodeResult:
    allocation_id, host_id = s.allocation_id, s.host_id
    assert allocation_id is not None and host_id is not None
    s = replace(_node_to(s, NodeStatus.READY), started_at=now)
    label = s.capacity_class.compute_class_label
    return s, [
        AddNode(s.id, s.cluster_id, allocation_id, host_id, s.gpu_indices, label),
        _node_event(
            s,
            Reason.NODE_ADDED,
            f"{label} node added on {s.host_id} with {s.gpus} GPU(s)",
            now,
            host_id=s.host_id,
            compute_class=label,
        ),
    ]


def _node_reclaimed(s: NodeState, ev: Reclaimed, now: Timestamp) -> _NodeResult:
    if not s.capacity_class.preemptible:
        raise Conflict(
            f"node {s.id} is a standard node: standard nodes are never preempted",
            hint="reclaim only preemptible nodes",
        )
    s = _node_to(s, NodeStatus.CORDONED)
    window = open_drain(now, s.grace_period_s)
    s = _node_draining(s, window, "reclaim", ev.for_subject)
    data = drain_data(
        window, for_subject=ev.for_subject, lost_gpu_s=ev.lost_gpu_s, reason=ev.reason
    )
    message = preempted_message(ev.for_subject, s.grace_period_s, ev.reason)
    return _node_signal(s, _node_event(s, Reason.PREEMPTED, message, now, **data), now)


def _node_stop(s: NodeState, now: Timestamp) -> _NodeResult:
    if s.status in (NodeStatus.CORDONED, NodeStatus.REMOVED):
        return s, []  # already leaving: a second request changes nothing
    if s.status is NodeStatus.PENDING:
        return _node_removed(s, now, "removed before it was ready")
    s = _node_to(s, NodeStatus.CORDONED)
    window = open_drain(now, s.grace_period_s)
    s = _node_draining(s, window, "stop", None)
    message = f"cordoned: pods get SIGTERM, the node is removed within {s.grace_period_s} s"
    data = drain_data(window, for_subject=None, lost_gpu_s=0, reason="stop")
    return _node_signal(s, _node_event(s, Reason.CORDONED, message, now, **data), now)


def _node_draining(
    s: NodeState, window: DrainWindow, reason: DrainReason, for_subject: str | None
) -> NodeState:
    return replace(
        s,
        notice_at=window.notice_at,
        deadline=window.deadline,
        billed_until=window.notice_at,
        drain_reason=reason,
        preempted_for=for_subject,
    )


def _node_signal(s: NodeState, notice: EmitEvent, now: Timestamp) -> _NodeResult:
    """Cordon first, then the notice, then SIGTERM to the node's pods; grace 0 kills at once."""
    assert s.allocation_id is not None
    fx: list[Effect] = [CordonNode(s.id), notice, SignalWorkload(s.id, s.allocation_id)]
    if deadline_due(s.deadline, now):
        s, more = _node_deadline(s, now)
        fx += more
    return s, fx


def _node_deadline(s: NodeState, now: Timestamp) -> _NodeResult:
    if s.status is not NodeStatus.CORDONED or not deadline_due(s.deadline, now):
        return s, []
    assert s.allocation_id is not None
    killed: list[Effect] = [
        KillWorkload(s.id, s.allocation_id),
        _node_event(s, Reason.KILLED, "grace period over: SIGKILL sent to the node's pods", now),
    ]
    s, fx = _node_gone(s, now)
    return s, killed + fx


def _node_gone(s: NodeState, now: Timestamp) -> _NodeResult:
    return _node_removed(s, now, "removed after its drain")


def _node_removed(s: NodeState, now: Timestamp, message: str) -> _NodeResult:
    had = s.allocation_id
    s = replace(_node_to(s, NodeStatus.REMOVED), allocation_id=None, waiting_for=frozenset())
    fx: list[Effect] = [RemoveNode(s.id)] if s.started_at is not None else []
    if had is not None:
        fx.append(ReleaseAllocation(had))
    fx.append(_node_event(s, Reason.NODE_REMOVED, f"node {message}", now, allocation_id=had))
    return s, fx
