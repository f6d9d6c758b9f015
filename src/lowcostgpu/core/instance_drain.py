"""The instance's drain: reclaim and stop, the SIGTERM's report, the deadline, and the end.

The drain is the one family of instance events that runs as a sequence over time (T+0 notice,
billing stops, SIGTERM; SIGKILL at the deadline; then interrupted and requeued, or stopped),
and its steps call one another rather than the rest of the state machine. So it lives apart
from `core.lifecycle`, which dispatches every event to its handler, keeps the queue, start, exit
and user-request handlers, and lists the decisions of the whole machine; the timing rules an
instance shares with a cluster node are `core.drain`, the record and the helpers every
transition is made of `core.instance_state`.
"""

from __future__ import annotations

from lowcostgpu.core.drain import (
    Reclaimed,
    SignalSent,
    deadline_due,
    drain_data,
    open_drain,
    preempted_message,
    signal_stamp,
)
from lowcostgpu.core.effects import Effect, EmitEvent, KillWorkload, SignalWorkload
from lowcostgpu.core.gang import hold_survivors, hosts_of, survivors_of
from lowcostgpu.core.instance_state import (
    DRAINING,
    HELD_RUN_MARK,
    InstanceState,
    Result,
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
from lowcostgpu.domain.errors import Conflict
from lowcostgpu.domain.events import Reason, iso_utc
from lowcostgpu.domain.status import InstanceStatus

_I = InstanceStatus


def member_gone(s: InstanceState, rank: int, exit_code: int | None, now: Timestamp) -> Result:
    """A draining member's workload is gone: the drain ends when the gang's last member has."""
    s = evolve(s, exit_code=exit_code if exit_code is not None else s.exit_code)
    if s.members:
        s = evolve(s, exited_ranks=s.exited_ranks | {rank})
        if len(s.exited_ranks) < s.nodes:
            return s, []
    return _finish_drain(s, now)


def reclaimed(s: InstanceState, ev: Reclaimed, now: Timestamp) -> Result:
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
        s, more = deadline(s, now)
        fx += more
    return s, fx


def stop(s: InstanceState, now: Timestamp) -> Result:
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


def signal_sent(s: InstanceState, ev: SignalSent) -> InstanceState:
    """The drain's SIGTERM really went out at `ev.at`: the grace counts from then
    (`drain.signal_stamp`). A report about another allocation, or after the drain, is stale."""
    if s.status not in DRAINING or s.rank_of(ev.allocation_id) is None:
        return s
    moved = signal_stamp(s.deadline, s.signal_sent_at, s.grace_period_s, ev)
    return s if moved is None else evolve(s, deadline=moved, signal_sent_at=ev.at)


def deadline(s: InstanceState, now: Timestamp) -> Result:
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
