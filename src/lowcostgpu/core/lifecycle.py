"""The instance state machine: queue, start, run, drain, requeue, stop, resume, delete.

`step(state, event, now)` returns the new state, the effects to carry out and the next wake-up
time. Every status change goes through `instance_state.to_status`, which checks it against
`INSTANCE_TRANSITIONS`; the record and the helpers the transitions share are in
`core.instance_state`. The drain's handlers (reclaim and stop, the SIGTERM's report, the
deadline, the end of the drain) are in `core.instance_drain`: this module dispatches to them.

Decisions this module makes (see DESIGN.md "The drain sequence"):
- An exit after a notice is an interruption (or a stop), never a success, whatever its code.
- SIGKILL at the deadline is final: the allocation is released then, a later exit is a no-op.
- `restart_count` is incremented when a previously placed instance is placed again, so the
  `StartWorkload` of the second run carries `LOWCOSTGPU_RESTART_COUNT=1`.
- A running instance cannot be deleted: stop it first (Conflict). Deleting never drains behind
  the user's back, and the stop's grace period lets the workload checkpoint.
- Runtime reports (started, exited, checkpoint) that arrive in a status they no longer apply to
  are stale and change nothing; user and scheduler requests in a wrong status raise.
- GPU billing of a run goes from the start of the workload to the notice (reclaim or stop), or
  to the exit when there was no notice (`Run`).
"""

from __future__ import annotations

from lowcostgpu.core.drain import (
    CheckpointReported,
    CompletionReported,
    DeadlineCheck,
    DeleteRequested,
    Enqueued,
    LifecycleEvent,
    Placed,
    Reclaimed,
    ResumeRequested,
    SignalSent,
    StartFailed,
    Step,
    StopRequested,
    VictimReleased,
    WorkloadExited,
    WorkloadStarted,
)
from lowcostgpu.core.effects import Effect
from lowcostgpu.core.gang import (
    hosts_of,
    kill_the_rest,
    member_exited,
    member_rank,
    start_effects,
)
from lowcostgpu.core.instance_drain import deadline, member_gone, reclaimed, signal_sent, stop
from lowcostgpu.core.instance_state import (
    DRAINING,
    SAVE_S_REPORTS_KEPT,
    InstanceState,
    Member,
    Result,
    Run,
    checked_status,
    checkpoint_words,
    close_run,
    end_survivor_hold,
    evolve,
    instance_event,
    release_gpus,
    to_status,
)
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import Conflict, InvalidRequest
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import INSTANCE_HOLDS_GPUS, InstanceStatus

__all__ = [
    "CheckpointReported",
    "CompletionReported",
    "DeadlineCheck",
    "DeleteRequested",
    "Enqueued",
    "InstanceState",
    "LifecycleEvent",
    "Placed",
    "Reclaimed",
    "ResumeRequested",
    "Run",
    "SignalSent",
    "StartFailed",
    "Step",
    "StopRequested",
    "VictimReleased",
    "WorkloadExited",
    "WorkloadStarted",
    "new_instance",
    "step",
]

_I = InstanceStatus


def new_instance(state: InstanceState, now: Timestamp) -> Step[InstanceState]:
    """Enqueue a freshly built instance: the `Queued` event and its enqueue time."""
    return step(state, Enqueued(), now)


def step(state: InstanceState, event: LifecycleEvent, now: Timestamp) -> Step[InstanceState]:
    """Advance an instance by one event at `now`."""
    s, fx = _dispatch(state, event, now)
    wake = s.deadline if s.status in DRAINING else (s.held_until if s.held else None)
    return Step(state=s, effects=tuple(fx), wake_at=wake)


def _dispatch(s: InstanceState, event: LifecycleEvent, now: Timestamp) -> Result:
    match event:
        case Enqueued():
            return _enqueue(s, now)
        case Placed():
            return _placed(s, event, now)
        case VictimReleased():
            return _victim_released(s, event)
        case WorkloadStarted():
            return _started(s, now)
        case StartFailed():
            return _start_failed(s, event, now)
        case WorkloadExited():
            return _exited(s, event, now)
        case CompletionReported():
            live = s.status in INSTANCE_HOLDS_GPUS
            return (evolve(s, completed_reported=True) if live else s), []
        case CheckpointReported():
            return _checkpoint(s, event, now)
        case Reclaimed():
            return reclaimed(s, event, now)
        case StopRequested():
            return stop(s, now)
        case ResumeRequested():
            return _resume(s, now)
        case DeleteRequested():
            return _delete(s, now)
        case SignalSent():
            return signal_sent(s, event), []
        case DeadlineCheck():
            return deadline(s, now)
    raise InvalidRequest(f"instance {s.id}: unknown event {event!r}")  # pragma: no cover


# --- Queue and start -----------------------------------------------------------------------


def _enqueue(s: InstanceState, now: Timestamp) -> Result:
    if s.status is not _I.QUEUED:
        return _resume(s, now)
    if s.enqueued_at is not None:
        return s, []  # already queued: enqueueing twice changes nothing
    s = evolve(s, enqueued_at=now)
    size = f"{s.gpus} GPU(s)" if s.nodes == 1 else f"{s.nodes} hosts × {s.gpus} GPU(s)"
    words = f"queued in {s.pool} for {size} ({s.capacity_class})"
    if s.capacity_class.preemptible:
        words += f": it starts when GPUs free up; `lowcostgpu show {s.id}` gives its place and ETA"
    return s, [instance_event(s, Reason.QUEUED, words, now, pool=str(s.pool), gpus=s.gpus)]


def _placed(s: InstanceState, ev: Placed, now: Timestamp) -> Result:
    s = end_survivor_hold(s, now)  # placed again: the hosts it kept are its own once more
    s = evolve(
        s,
        status=checked_status(s, _I.STARTING),
        restart_count=s.restart_count + (1 if s.placement_count > 0 else 0),
        placement_count=s.placement_count + 1,
        allocation_id=ev.allocation_id,
        host_id=ev.host_id,
        gpu_indices=tuple(sorted(ev.gpu_indices)),
        members=tuple(Member(a, h, tuple(sorted(g))) for a, h, g in ev.members),
        exited_ranks=frozenset(),
        waiting_for=frozenset(ev.waits_for),
        started_at=None,
        notice_at=None,
        deadline=None,
        signal_sent_at=None,
        drain_reason=None,
        preempted_for=None,
        exit_code=None,
        failure_reason=None,
        completed_reported=False,
    )
    gpus = ",".join(map(str, s.gpu_indices))
    words = f"scheduled on {ev.host_id}, GPUs {gpus}"
    if s.members:
        words = f"scheduled on {s.nodes} hosts ({', '.join(hosts_of(s))}), {s.gpus} GPU(s) each"
    if s.waiting_for:
        words += (
            f"; starts when the interruptible work on them has left "
            f"({len(s.waiting_for)} reclaimed allocation(s), within their grace period)"
        )
    data: dict[str, object] = {"host_id": ev.host_id, "gpu_indices": list(s.gpu_indices)}
    if s.members:
        data["host_ids"] = hosts_of(s)
    fx: list[Effect] = [instance_event(s, Reason.SCHEDULED, words, now, **data)]
    if not s.waiting_for:
        fx += start_effects(s)
    return s, fx


def _victim_released(s: InstanceState, ev: VictimReleased) -> Result:
    if s.status is not _I.STARTING or ev.allocation_id not in s.waiting_for:
        return s, []
    s = evolve(s, waiting_for=s.waiting_for - {ev.allocation_id})
    return s, ([] if s.waiting_for else start_effects(s))


def _started(s: InstanceState, now: Timestamp) -> Result:
    if s.status is not _I.STARTING or not s.launched:
        return s, []  # a late or duplicate report
    allocation_id = s.allocation_id
    assert allocation_id is not None
    s = evolve(
        s,
        status=checked_status(s, _I.RUNNING),
        started_at=now,
        runs=(*s.runs, Run(allocation_id, now)),
    )
    if s.restart_count == 0:
        return s, [instance_event(s, Reason.STARTED, f"started on {s.host_id}", now)]
    words = f"auto-restarted (restart {s.restart_count}): resumes from {checkpoint_words(s)}"
    data = {"restart_count": s.restart_count, "resume_step": s.last_checkpoint_step}
    return s, [instance_event(s, Reason.RESTARTED, words, now, **data)]


def _start_failed(s: InstanceState, ev: StartFailed, now: Timestamp) -> Result:
    rank = member_rank(s, ev.allocation_id)
    if rank is None or rank in s.exited_ranks:
        return s, []  # about a member of an earlier run, or one already gone (a repeat)
    if s.status in DRAINING:
        return member_gone(s, rank, None, now)
    if s.members and s.status is _I.RUNNING:
        s = close_run(s, now)  # a member that cannot start fails the gang it belongs to
    elif s.status is not _I.STARTING:
        return s, []
    killed = kill_the_rest(s, rank)
    s = evolve(s, status=checked_status(s, _I.FAILED), failure_reason=ev.reason)
    who = f"rank {rank} " if s.members else ""
    words = f"{who}could not start: {ev.reason}; its GPUs are released"
    if not s.runs or s.runs[-1].allocation_id != s.allocation_id:
        words += " (no GPU time is billed)"
    s, fx = release_gpus(s, [instance_event(s, Reason.FAILED, words, now)])
    return s, killed + fx


def _checkpoint(s: InstanceState, ev: CheckpointReported, now: Timestamp) -> Result:
    if s.status is _I.DELETED:
        return s, []
    saves = s.save_s_reports
    if ev.save_s is not None:
        saves = (*saves, ev.save_s)[-SAVE_S_REPORTS_KEPT:]
    s = evolve(
        s,
        last_checkpoint_step=ev.step,
        last_checkpoint_at=now,
        save_s_reports=saves,
        saves_on_notice=ev.saves_on_notice,
    )
    words = f"checkpoint step {ev.step} on volume"
    return s, [instance_event(s, Reason.CHECKPOINT_REPORTED, words, now, step=ev.step)]


# --- Exit and outcome -------------------------------------------------------------------------


def _exited(s: InstanceState, ev: WorkloadExited, now: Timestamp) -> Result:
    rank = member_rank(s, ev.allocation_id)
    if rank is None or rank in s.exited_ranks:
        return s, []  # about a member of an earlier run, or one already gone (a repeat)
    if s.status in DRAINING:
        return member_gone(s, rank, ev.exit_code, now)
    if s.status is _I.STARTING and s.launched:
        s, started = _started(s, now)  # it exited before its start was seen: it did start
        s, fx = _exited(s, ev, now)
        return s, started + fx
    if s.status is not _I.RUNNING:
        return s, []  # stale: after SIGKILL the drain is already over
    if s.members:
        return member_exited(s, rank, ev.exit_code, now)
    s = close_run(evolve(s, exit_code=ev.exit_code), now)
    if s.completed_reported or ev.exit_code == 0:
        s = to_status(s, _I.SUCCEEDED)
        return release_gpus(
            s, [instance_event(s, Reason.SUCCEEDED, "succeeded", now, exit_code=ev.exit_code)]
        )
    reason = "exited without an exit code" if ev.exit_code is None else f"exited {ev.exit_code}"
    s = evolve(s, status=checked_status(s, _I.FAILED), failure_reason=reason)
    words = f"failed: the workload {reason}; `lowcostgpu logs {s.id}` shows its output"
    return release_gpus(s, [instance_event(s, Reason.FAILED, words, now, exit_code=ev.exit_code)])


# --- User requests ----------------------------------------------------------------------------


def _resume(s: InstanceState, now: Timestamp) -> Result:
    if s.status is _I.QUEUED:
        return s, []  # already waiting in the queue
    s = evolve(
        s,
        status=checked_status(s, _I.QUEUED),
        enqueued_at=s.enqueued_at if s.enqueued_at is not None else now,
        stop_requested=False,
    )
    words = f"resumed: queued again at its original position; {checkpoint_words(s)}"
    return s, [instance_event(s, Reason.QUEUED, words, now, enqueued_at=s.enqueued_at)]


def _delete(s: InstanceState, now: Timestamp) -> Result:
    if s.status is _I.DELETED:
        return s, []
    if s.status in INSTANCE_HOLDS_GPUS:
        raise Conflict(
            f"instance {s.id} is {s.status}: it still holds GPUs and cannot be deleted",
            hint=f"stop it first (`lowcostgpu stop {s.id}`), then delete it once it is stopped",
            status=str(s.status),
        )
    s = to_status(s, _I.DELETED)
    return s, [
        instance_event(s, Reason.DELETED, "deleted; its volume is kept unless deleted too", now)
    ]
