"""The instance record, and the building blocks every lifecycle transition is made of.

`core.lifecycle` is the transition table: one function per event, each deciding what the event
means in the instance's status. What those functions share lives here — the record itself, the
checked status change, the event an instance emits, freeing its GPUs, closing a run's billing —
so that the table reads as a list of decisions and every change of status or allocation is made
the same way. `core.lifecycle` re-exports `InstanceState` and `Run`: the record is part of its
vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

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
    interruption_count: int = 0
    last_interrupted_at: Timestamp | None = None
    exit_code: int | None = None
    failure_reason: str | None = None
    completed_reported: bool = False
    runs: tuple[Run, ...] = ()

    def __post_init__(self) -> None:
        check_grace_period(self.grace_period_s, subject=f"instance {self.id}")
        if self.gpus < 1:
            raise InvalidRequest(f"instance {self.id}: gpus must be ≥ 1, got {self.gpus}")

    @property
    def launched(self) -> bool:
        """Placed and told to start (not still waiting for reclaimed GPUs to be freed)."""
        return self.allocation_id is not None and not self.waiting_for


Result = tuple[InstanceState, list[Effect]]  # what one transition returns


def to_status(s: InstanceState, target: InstanceStatus) -> InstanceState:
    """The one way an instance changes status: checked against `INSTANCE_TRANSITIONS`."""
    status = check_transition(INSTANCE_TRANSITIONS, s.status, target, subject=f"instance {s.id}")
    return replace(s, status=status)


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
    released: list[Effect] = []
    if s.allocation_id is not None:
        released.append(ReleaseAllocation(s.allocation_id))
    s = replace(s, allocation_id=None, host_id=None, gpu_indices=(), waiting_for=frozenset())
    return s, released + fx


def close_run(s: InstanceState, at: Timestamp) -> InstanceState:
    """End GPU billing of the current run at `at` (the notice, or the exit without notice)."""
    if not s.runs or s.runs[-1].billed_until is not None:
        return s
    return replace(s, runs=(*s.runs[:-1], replace(s.runs[-1], billed_until=at)))
