"""The instance record, and the building blocks every lifecycle transition is made of.

`core.lifecycle` is the transition table (with the drain's handlers in `core.instance_drain`):
one function per event, each deciding what the event means in the instance's status. What those
functions share lives here — the record itself, the checked status change, the event an instance
emits, freeing its GPUs, closing a run's billing — so that the table reads as a list of decisions
and every change of status or allocation is made the same way. `core.lifecycle` re-exports
`InstanceState` and `Run`: the record is part of its vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from lowcostgpu.core.drain import DEFAULT_GRACE_PERIOD_S, DrainReason, check_grace_period
from lowcostgpu.core.effects import Effect, EmitEvent, ReleaseAllocation
from lowcostgpu.domain.capacity import CapacityClass, PoolKey, Timestamp
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import (
    INSTANCE_TRANSITIONS,
    LIVE_INSTANCE_STATUSES,
    InstanceStatus,
    check_transition,
)

_I = InstanceStatus
# How many recent save times an instance keeps: the largest of them is the save time victim
# choice believes (a safety margin: one fast save does not make a slow saver look cheap).
SAVE_S_REPORTS_KEPT: Final = 3
DRAINING = frozenset({_I.INTERRUPTING, _I.STOPPING})
# The statuses of the instances the engine's live state keeps (`domain.status`, the one
# definition, shared with the store's live query). An instance outside them holds no GPUs, no
# ticket and no open deadline, so it may leave the state (`engine.forget_instances`).
LIVE = LIVE_INSTANCE_STATUSES


@dataclass(frozen=True, slots=True)
class Run:
    """One stretch of a workload on GPUs; GPU billing covers [started_at, billed_until)."""

    allocation_id: str
    started_at: Timestamp
    billed_until: Timestamp | None = None
    # The GPUs billed in this stretch; None: the instance's own (`total_gpus`). A gang's hold of
    # its surviving hosts (`InstanceState.held_runs`) bills the GPUs it holds, idle, for it.
    gpus: int | None = None


HELD_RUN_MARK: Final = ":held"  # a survivor hold's id: its drained run's allocation id, then this
SURVIVOR_HOLD_EXTRA_S: Final = 300  # a survivor hold lasts at most the grace plus this


@dataclass(frozen=True, slots=True)
class Member:
    """A gang member past rank 0, on its own host: its allocation (`member_allocation_id`) and
    GPUs. Rank 0 is the instance's own `allocation_id`, `host_id` and `gpu_indices`."""

    allocation_id: str
    host_id: str
    gpu_indices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class InstanceState:
    id: str
    account_id: str
    pool: PoolKey
    gpus: int
    capacity_class: CapacityClass
    status: InstanceStatus = InstanceStatus.QUEUED
    auto_requeue: bool = True
    grace_period_s: int = DEFAULT_GRACE_PERIOD_S
    enqueued_at: Timestamp | None = None  # the first enqueue, kept across requeues
    restart_count: int = 0
    placement_count: int = 0
    allocation_id: str | None = None
    host_id: str | None = None
    gpu_indices: tuple[int, ...] = ()
    waiting_for: frozenset[str] = field(default_factory=frozenset)
    started_at: Timestamp | None = None
    notice_at: Timestamp | None = None
    deadline: Timestamp | None = None
    signal_sent_at: Timestamp | None = None  # the drain's SIGTERM, once it moved the deadline
    drain_reason: DrainReason | None = None
    preempted_for: str | None = None
    stop_requested: bool = False  # a stop asked during an interruption: no requeue after it
    last_checkpoint_step: int | None = None
    last_checkpoint_at: Timestamp | None = None
    # The save times (whole seconds) of the last `SAVE_S_REPORTS_KEPT` checkpoints that said one,
    # oldest first, and whether the latest checkpoint said it saves at a notice: victim choice
    # charges a believed saver its save time (`domain.capacity.Allocation.notice_save_s`).
    save_s_reports: tuple[int, ...] = ()
    saves_on_notice: bool = False
    interruption_count: int = 0
    last_interrupted_at: Timestamp | None = None
    exit_code: int | None = None
    failure_reason: str | None = None
    completed_reported: bool = False
    runs: tuple[Run, ...] = ()
    # A multi-node instance (a gang) holds `nodes` hosts with `gpus` GPUs each: rank 0 above,
    # the others in `members` while it holds GPUs. `exited_ranks`: the members whose workload
    # has gone in this run (the gang's run ends when the last one has).
    nodes: int = 1
    members: tuple[Member, ...] = ()
    exited_ranks: frozenset[int] = frozenset()
    # Keeping the survivors: after a reclaim of some of a gang's hosts, the others stay held
    # for it for `hold_survivors_s` (0: off). `held_hosts` are kept from the reclaim on;
    # `held_until` is set when the drain ends and the gang is requeued (`core.queue`).
    hold_survivors_s: int = 0
    held_hosts: tuple[str, ...] = ()
    held_until: Timestamp | None = None
    held_runs: tuple[Run, ...] = ()  # each hold, billed from the drain's end to the hold's

    def __post_init__(self) -> None:
        check_grace_period(self.grace_period_s, subject=f"instance {self.id}")
        if self.gpus < 1:
            raise InvalidRequest(f"instance {self.id}: gpus must be ≥ 1, got {self.gpus}")
        if self.nodes < 1:
            raise InvalidRequest(f"instance {self.id}: nodes must be ≥ 1, got {self.nodes}")
        if self.hold_survivors_s:
            check_survivor_hold(self.hold_survivors_s, self.nodes, self.grace_period_s)

    @property
    def held(self) -> bool:
        """Queued with its surviving hosts held for it (until `held_until`)."""
        return self.held_until is not None and self.status is InstanceStatus.QUEUED

    @property
    def total_gpus(self) -> int:
        """GPUs across all its hosts: what it is billed and metered for."""
        return self.gpus * self.nodes

    def allocation_ids(self) -> tuple[str, ...]:
        """Every allocation it holds, rank 0 first (none when it holds no GPUs)."""
        if self.allocation_id is None:
            return ()
        return (self.allocation_id, *(m.allocation_id for m in self.members))

    def rank_of(self, allocation_id: str) -> int | None:
        """The rank of the member holding `allocation_id`, None if no member of this run does."""
        if allocation_id == self.allocation_id:
            return 0
        for rank, member in enumerate(self.members, start=1):
            if member.allocation_id == allocation_id:
                return rank
        return None

    def host_of(self, allocation_id: str) -> str | None:
        """The host of one of its allocations (None: not one of them)."""
        rank = self.rank_of(allocation_id)
        if rank is None:
            return None
        return self.host_id if rank == 0 else self.members[rank - 1].host_id

    @property
    def launched(self) -> bool:
        """Placed and told to start (not still waiting for reclaimed GPUs to be freed)."""
        return self.allocation_id is not None and not self.waiting_for


class _Keep(Enum):
    KEEP = "keep"


KEEP: Final = _Keep.KEEP  # `evolve`'s "this field stays as it is"
_new = object.__new__
_set = object.__setattr__
_NO_IDS: frozenset[str] = frozenset()


def evolve(
    s: InstanceState,
    *,
    status: InstanceStatus | _Keep = KEEP,
    enqueued_at: Timestamp | _Keep | None = KEEP,
    restart_count: int | _Keep = KEEP,
    placement_count: int | _Keep = KEEP,
    allocation_id: str | _Keep | None = KEEP,
    host_id: str | _Keep | None = KEEP,
    gpu_indices: tuple[int, ...] | _Keep = KEEP,
    waiting_for: frozenset[str] | _Keep = KEEP,
    started_at: Timestamp | _Keep | None = KEEP,
    notice_at: Timestamp | _Keep | None = KEEP,
    deadline: Timestamp | _Keep | None = KEEP,
    signal_sent_at: Timestamp | _Keep | None = KEEP,
    drain_reason: DrainReason | _Keep | None = KEEP,
    preempted_for: str | _Keep | None = KEEP,
    stop_requested: bool | _Keep = KEEP,
    last_checkpoint_step: int | _Keep | None = KEEP,
    last_checkpoint_at: Timestamp | _Keep | None = KEEP,
    save_s_reports: tuple[int, ...] | _Keep = KEEP,
    saves_on_notice: bool | _Keep = KEEP,
    interruption_count: int | _Keep = KEEP,
    last_interrupted_at: Timestamp | _Keep | None = KEEP,
    exit_code: int | _Keep | None = KEEP,
    failure_reason: str | _Keep | None = KEEP,
    completed_reported: bool | _Keep = KEEP,
    runs: tuple[Run, ...] | _Keep = KEEP,
    members: tuple[Member, ...] | _Keep = KEEP,
    exited_ranks: frozenset[int] | _Keep = KEEP,
    held_hosts: tuple[str, ...] | _Keep = KEEP,
    held_until: Timestamp | _Keep | None = KEEP,
    held_runs: tuple[Run, ...] | _Keep = KEEP,
) -> InstanceState:
    """`dataclasses.replace(s, ...)` of the fields a transition changes, at a quarter of the cost.

    Every lifecycle step makes one or more copies of the 30-field record, and `replace` (a loop
    over `fields()`, a keyword dict, `__init__` and `__post_init__`) was a third of the
    simulator's time per event. This builds the slots object directly. The identity, sizing and
    grace period (`id` … `grace_period_s`, and `nodes`) are not parameters: no transition
    changes them, so the checks of `__post_init__` already made on `s` still hold.
    `tests/core/test_instance_state.py` checks it against `replace` field by field.
    """
    new: InstanceState = _new(InstanceState)
    _set(new, "id", s.id)
    _set(new, "account_id", s.account_id)
    _set(new, "pool", s.pool)
    _set(new, "gpus", s.gpus)
    _set(new, "capacity_class", s.capacity_class)
    _set(new, "auto_requeue", s.auto_requeue)
    _set(new, "grace_period_s", s.grace_period_s)
    _set(new, "status", s.status if status is KEEP else status)
    _set(new, "enqueued_at", s.enqueued_at if enqueued_at is KEEP else enqueued_at)
    _set(new, "restart_count", s.restart_count if restart_count is KEEP else restart_count)
    _set(new, "placement_count", s.placement_count if placement_count is KEEP else placement_count)
    _set(new, "allocation_id", s.allocation_id if allocation_id is KEEP else allocation_id)
    _set(new, "host_id", s.host_id if host_id is KEEP else host_id)
    _set(new, "gpu_indices", s.gpu_indices if gpu_indices is KEEP else gpu_indices)
    _set(new, "waiting_for", s.waiting_for if waiting_for is KEEP else waiting_for)
    _set(new, "started_at", s.started_at if started_at is KEEP else started_at)
    _set(new, "notice_at", s.notice_at if notice_at is KEEP else notice_at)
    _set(new, "deadline", s.deadline if deadline is KEEP else deadline)
    _set(new, "signal_sent_at", s.signal_sent_at if signal_sent_at is KEEP else signal_sent_at)
    _set(new, "drain_reason", s.drain_reason if drain_reason is KEEP else drain_reason)
    _set(new, "preempted_for", s.preempted_for if preempted_for is KEEP else preempted_for)
    _set(new, "stop_requested", s.stop_requested if stop_requested is KEEP else stop_requested)
    _set(
        new,
        "last_checkpoint_step",
        s.last_checkpoint_step if last_checkpoint_step is KEEP else last_checkpoint_step,
    )
    _set(
        new,
        "last_checkpoint_at",
        s.last_checkpoint_at if last_checkpoint_at is KEEP else last_checkpoint_at,
    )
    _set(new, "save_s_reports", s.save_s_reports if save_s_reports is KEEP else save_s_reports)
    _set(new, "saves_on_notice", s.saves_on_notice if saves_on_notice is KEEP else saves_on_notice)
    _set(
        new,
        "interruption_count",
        s.interruption_count if interruption_count is KEEP else interruption_count,
    )
    _set(
        new,
        "last_interrupted_at",
        s.last_interrupted_at if last_interrupted_at is KEEP else last_interrupted_at,
    )
    _set(new, "exit_code", s.exit_code if exit_code is KEEP else exit_code)
    _set(new, "failure_reason", s.failure_reason if failure_reason is KEEP else failure_reason)
    _set(
        new,
        "completed_reported",
        s.completed_reported if completed_reported is KEEP else completed_reported,
    )
    _set(new, "runs", s.runs if runs is KEEP else runs)
    _set(new, "nodes", s.nodes)
    _set(new, "members", s.members if members is KEEP else members)
    _set(new, "exited_ranks", s.exited_ranks if exited_ranks is KEEP else exited_ranks)
    _set(new, "hold_survivors_s", s.hold_survivors_s)
    _set(new, "held_hosts", s.held_hosts if held_hosts is KEEP else held_hosts)
    _set(new, "held_until", s.held_until if held_until is KEEP else held_until)
    _set(new, "held_runs", s.held_runs if held_runs is KEEP else held_runs)
    return new


Result = tuple[InstanceState, list[Effect]]  # what one transition returns


def to_status(s: InstanceState, target: InstanceStatus) -> InstanceState:
    """The one way an instance changes status: checked against `INSTANCE_TRANSITIONS`."""
    return evolve(s, status=checked_status(s, target))


def checked_status(s: InstanceState, target: InstanceStatus) -> InstanceStatus:
    """`target`, once checked against `INSTANCE_TRANSITIONS` (for a transition that changes
    other fields in the same copy: `evolve(s, status=checked_status(s, …), …)`)."""
    if target in INSTANCE_TRANSITIONS[s.status]:
        return target  # the common case, without building the error's subject
    return check_transition(INSTANCE_TRANSITIONS, s.status, target, subject=f"instance {s.id}")


def instance_event(
    s: InstanceState, reason: Reason, message: str, now: Timestamp, /, **data: Any
) -> EmitEvent:
    return EmitEvent("instance", s.id, reason, message, now, s.account_id, data)


def checkpoint_words(s: InstanceState) -> str:
    if s.last_checkpoint_step is None:
        return "no checkpoint reported"
    return f"checkpoint step {s.last_checkpoint_step} on volume"


def release_gpus(s: InstanceState, fx: list[Effect]) -> Result:
    """Free the GPUs first, then say so: the on-demand request waiting for them starts sooner."""
    released: list[Effect] = [ReleaseAllocation(a) for a in s.allocation_ids()]
    s = evolve(
        s,
        allocation_id=None,
        host_id=None,
        gpu_indices=(),
        waiting_for=_NO_IDS,
        members=(),
        exited_ranks=frozenset(),
    )
    return s, released + fx


def close_run(s: InstanceState, at: Timestamp) -> InstanceState:
    """End GPU billing of the current run at `at` (the notice, or the exit without notice), or
    of a survivor hold (its end)."""
    if not s.runs or s.runs[-1].billed_until is not None:
        return s
    last = s.runs[-1]
    return evolve(s, runs=(*s.runs[:-1], Run(last.allocation_id, last.started_at, at)))


def check_survivor_hold(hold_s: int, nodes: int, grace_period_s: int) -> None:
    """`hold_survivors_s`: for a multi-node instance, 0 to its grace plus a few minutes."""
    top = grace_period_s + SURVIVOR_HOLD_EXTRA_S
    if nodes == 1 and hold_s:
        raise InvalidRequest(
            "hold_survivors_s is for multi-node instances: one host has no survivors to hold",
            hint="leave it out, or launch with nodes > 1",
        )
    if not 0 <= hold_s <= top:
        raise InvalidRequest(
            f"hold_survivors_s must be 0 to {top} s (the grace period plus "
            f"{SURVIVOR_HOLD_EXTRA_S} s), got {hold_s}",
            hint="hold the surviving hosts for at most a few minutes after the drain",
        )


def end_survivor_hold(s: InstanceState, at: Timestamp) -> InstanceState:
    """The hold of its surviving hosts is over (placed again, stopped, or expired at `at`):
    its billing ends and the hosts go back to the queue."""
    if not s.held_hosts and s.held_until is None:
        return s
    held_runs = s.held_runs
    if held_runs and held_runs[-1].billed_until is None:
        last = held_runs[-1]
        held_runs = (*held_runs[:-1], Run(last.allocation_id, last.started_at, at, last.gpus))
    return evolve(s, held_hosts=(), held_until=None, held_runs=held_runs)
