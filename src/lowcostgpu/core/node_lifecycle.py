"""The cluster node's state machine: `node_step` over `NODE_TRANSITIONS`, and its own events.

The record (`core.nodes.NodeState`) and what is derived from it (its ticket, its allocation,
labels and taints) are read all over the plane; the transitions are taken only where the core
advances a node (`core.work`, `core.cluster_reconcile`). They are apart so that each reads
alone, as an instance's record (`core.instance_state`) is apart from its transitions
(`core.lifecycle`). A node's drain follows the shared rules of `core.drain` (T+0 cordon, notice
and SIGTERM; removal when its pods are gone or at the deadline); one function per event below
decides what the event means in the node's status.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from lowcostgpu.core.drain import (
    DeadlineCheck,
    DrainWindow,
    Placed,
    Reclaimed,
    SignalSent,
    Step,
    StopRequested,
    VictimReleased,
    WorkloadExited,
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
from lowcostgpu.core.nodes import DRAIN_CLUSTER_DELETE, DRAIN_PREEMPTED, DRAIN_SCALE_DOWN, NodeState
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import Conflict, InvalidRequest
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import NODE_TRANSITIONS, NodeStatus, check_transition

_N = NodeStatus


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
