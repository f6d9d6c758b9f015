"""The instance state machine: queue, start, run, drain, requeue, stop, resume, delete.

`step(state, event, now)` returns the new state, the effects to carry out and the next wake-up
time. Every status change goes through `instance_state.to_status`, which checks it against
`INSTANCE_TRANSITIONS`; the record and the helpers the transitions share are in
`core.instance_state`.

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
    deadline_due,
    drain_data,
    open_drain,
    preempted_message,
    signal_stamp,
)
from lowcostgpu.core.effects import Effect, EmitEvent, KillWorkload, SignalWorkload
from lowcostgpu.core.gang import (
    hold_survivors,
    hosts_of,
    kill_the_rest,
    member_exited,
    member_rank,
    start_effects,
    survivors_of,
)
from lowcostgpu.core.instance_state import (
    DRAINING,
    HELD_RUN_MARK,
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
from lowcostgpu.domain.events import Reason, iso_utc
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
            return _reclaimed(s, event, now)
        case StopRequested():
            return _stop(s, now)
        case ResumeRequested():
            return _resume(s, now)
        case DeleteRequested():
            return _delete(s, now)
        case SignalSent():
            return _signal_sent(s, event), []
        case DeadlineCheck():
            return _deadline(s, now)
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
        return _member_gone(s, rank, None, now)
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


def _member_gone(s: InstanceState, rank: int, exit_code: int | None, now: Timestamp) -> Result:
    """A draining member's workload is gone: the drain ends when the gang's last member has."""
    s = evolve(s, exit_code=exit_code if exit_code is not None else s.exit_code)
    if s.members:
        s = evolve(s, exited_ranks=s.exited_ranks | {rank})
        if len(s.exited_ranks) < s.nodes:
            return s, []
    return _finish_drain(s, now)


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
        return _member_gone(s, rank, ev.exit_code, now)
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


# --- The drain: reclaim and stop ---------------------------------------------------------------


def _reclaimed(s: InstanceState, ev: Reclaimed, now: Timestamp) -> Result:
    if not s.capacity_class.preemptible:
        raise Conflict(
            f"instance {s.id} is on-demand: on-demand instances are never preempted",
            hint="reclaim only interruptible allocations",
        )
    window = open_drain(now, s.grace_period_s)
    s = evolve(
        s,
        status=checked_status(s, _I.INTERRUPTING),
        notice_at=window.notice_at,
        deadline=window.deadline,
        drain_reason="reclaim",
        preempted_for=ev.for_subject,
        interruption_count=s.interruption_count + 1,
        last_interrupted_at=now,
        held_hosts=survivors_of(s, ev),
    )
    shown = ev.shown_for_subject(s.account_id)
    data = drain_data(
        window,
        for_subject=shown,
        lost_gpu_s=ev.lost_gpu_s,
        reason=ev.reason,
        policy=ev.policy,
        last_checkpoint_step=s.last_checkpoint_step,
        restart_count=s.restart_count,
        gpu_type=s.pool.gpu_type,  # statistics per GPU type read the event alone
        run_s=None if s.started_at is None else max(0, now - s.started_at),
        auto_requeue=s.auto_requeue,
    )
    if s.members:  # a gang is reclaimed as one: the notice names every host it leaves
        data = {**data, "host_ids": hosts_of(s), "nodes": s.nodes}
    message = preempted_message(window, kept=_kept_words(s), then=_after_reclaim_words(s))
    return _begin_drain(s, instance_event(s, Reason.PREEMPTED, message, now, **data), now)


def _kept_words(s: InstanceState) -> str:
    if s.last_checkpoint_step is None:
        return "your volume is kept (no checkpoint reported yet)"
    return f"your volume is kept (last checkpoint: step {s.last_checkpoint_step})"


def _after_reclaim_words(s: InstanceState) -> str:
    """What happens after the stop: the requeue (auto-requeue) or what the customer can do."""
    if s.auto_requeue:
        return "then it is requeued at its original place and resumes from its last checkpoint"
    return f"auto-requeue is off: `lowcostgpu resume {s.id}` queues it again"


def _begin_drain(s: InstanceState, notice: EmitEvent, now: Timestamp) -> Result:
    """T+0: billing stops, SIGTERM; a workload never launched, or grace 0, ends at once."""
    s = close_run(s, now)
    if not s.launched:
        s, ended = _finish_drain(s, now)
        return s, [notice, *ended]
    fx: list[Effect] = [notice]
    fx += [SignalWorkload(s.id, a, "SIGTERM") for a in s.allocation_ids()]
    if deadline_due(s.deadline, now):
        s, more = _deadline(s, now)
        fx += more
    return s, fx


def _stop(s: InstanceState, now: Timestamp) -> Result:
    if s.status in (_I.STOPPING, _I.STOPPED):
        return s, []  # stopping twice changes nothing
    if s.status is _I.INTERRUPTING:
        words = "stop requested during the interruption: it will not be requeued"
        s = evolve(s, stop_requested=True)
        return s, [instance_event(s, Reason.STOPPING, words, now)]
    if s.status in (_I.QUEUED, _I.INTERRUPTED):
        s = to_status(end_survivor_hold(s, now), _I.STOPPED)
        return s, [instance_event(s, Reason.STOPPED, f"stopped; {checkpoint_words(s)}", now)]
    window = open_drain(now, s.grace_period_s)
    s = evolve(
        s,
        status=checked_status(s, _I.STOPPING),
        notice_at=window.notice_at,
        deadline=window.deadline,
        drain_reason="stop",
    )
    words = preempted_message(
        window,
        kept="your volume is kept",
        then=f"it is not requeued (`lowcostgpu resume {s.id}` queues it again)",
        head="stopping as asked",
    )
    data = drain_data(window, for_subject=None, lost_gpu_s=0, reason="stop")
    return _begin_drain(s, instance_event(s, Reason.STOPPING, words, now, **data), now)


def _signal_sent(s: InstanceState, ev: SignalSent) -> InstanceState:
    """The drain's SIGTERM really went out at `ev.at`: the grace counts from then
    (`drain.signal_stamp`). A report about another allocation, or after the drain, is stale."""
    if s.status not in DRAINING or s.rank_of(ev.allocation_id) is None:
        return s
    moved = signal_stamp(s.deadline, s.signal_sent_at, s.grace_period_s, ev)
    return s if moved is None else evolve(s, deadline=moved, signal_sent_at=ev.at)


def _deadline(s: InstanceState, now: Timestamp) -> Result:
    if s.held and s.held_until is not None and s.held_until <= now:
        s = end_survivor_hold(s, s.held_until)
        words = (
            "the hosts held for it since its interruption are released (no other host freed "
            "in time); it waits in its place for all its hosts"
        )
        return s, [instance_event(s, Reason.HOSTS_RELEASED, words, now)]
    if s.status not in DRAINING or not deadline_due(s.deadline, now):
        return s, []  # not yet (the step's wake_at is still the deadline) or a stale timer
    killed: list[Effect] = [
        KillWorkload(s.id, a)
        for rank, a in enumerate(s.allocation_ids())
        if rank not in s.exited_ranks
    ]
    killed.append(instance_event(s, Reason.KILLED, _killed_words(s), now, deadline=s.deadline))
    s, fx = _finish_drain(s, now)
    return s, killed + fx


def _killed_words(s: InstanceState) -> str:
    assert s.deadline is not None
    return (
        f"grace period over at {iso_utc(s.deadline)} and still running: killed (SIGKILL); "
        f"work since the last checkpoint is lost ({checkpoint_words(s)})"
    )


def _finish_drain(s: InstanceState, now: Timestamp) -> Result:
    """The workload is gone (exited or killed): free the GPUs, then interrupted or stopped."""
    if s.status is _I.STOPPING:
        s = to_status(s, _I.STOPPED)
        return release_gpus(
            s, [instance_event(s, Reason.STOPPED, f"stopped; {checkpoint_words(s)}", now)]
        )
    s = to_status(s, _I.INTERRUPTED)
    words = f"interrupted — {checkpoint_words(s)}"
    data = {
        "last_checkpoint_step": s.last_checkpoint_step,
        "exit_code": s.exit_code,
        # what the drained run's lost-work credit is decided on, at its end (`core.credits`)
        "allocation_id": s.allocation_id,
        "notice_at": s.notice_at,
        "last_checkpoint_at": s.last_checkpoint_at,
    }
    drained = s.allocation_id
    s, fx = release_gpus(s, [instance_event(s, Reason.INTERRUPTED, words, now, **data)])
    if s.stop_requested:
        s = to_status(evolve(s, held_hosts=()), _I.STOPPED)
        return s, [*fx, instance_event(s, Reason.STOPPED, "stopped after its interruption", now)]
    if s.auto_requeue:
        s = to_status(s, _I.QUEUED)
        words = "requeued at its original position; restarts from its volume when capacity frees"
        requeued: dict[str, object] = {"enqueued_at": s.enqueued_at}
        if s.held_hosts:
            s = hold_survivors(s, f"{drained}{HELD_RUN_MARK}", now)
            words += (
                f"; its other {len(s.held_hosts)} host(s) are held for it until "
                f"{iso_utc(s.held_until or now)}, billed at its rate, so it restarts as soon as "
                "one more host frees"
            )
            requeued |= {"held_hosts": list(s.held_hosts), "held_until": s.held_until}
        return s, [*fx, instance_event(s, Reason.REQUEUED, words, now, **requeued)]
    return s, fx


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
