"""The drain sequence shared by instances and nodes (`core.instance_drain`, `core.node_lifecycle`).

T+0: notice (SIGTERM, `Preempted` or `Stopping`/`Cordoned`), GPU billing stops. T+grace: SIGKILL
for whatever still runs. The timing rules live here once (`open_drain`, `deadline_due`,
`drain_data`, `signal_stamp`) so that an instance and a node can never disagree about when a
deadline falls due.

The grace counts from the SIGTERM the workload really receives, not from the decision: the
decision sets the deadline to decision time + grace, and when the shell has carried out the
`SignalWorkload` it reports `SignalSent`, which moves the deadline to sent + grace if that is
later (`signal_stamp`): a late effect (a slow commit, a retry after a runtime outage) never
shortens the grace. The move happens once per allocation (`signal_sent_at` records it), so a
replayed signal does not push the deadline again; a crash before the report leaves the
decision's deadline, which the workload had been told already.

Like a Kopf handler, a step never sleeps: it returns `wake_at`, the time at which the shell must
call again with `DeadlineCheck`. Durable deadlines live in the store, not in a sleeping task.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, TypeVar

from lowcostgpu.core.effects import Effect
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.events import elapsed_words, iso_utc

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
    # A gang's other members, rank 1 on: (allocation id, host id, GPU indices) each.
    members: tuple[tuple[str, str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class VictimReleased:
    """A draining allocation that a placement waited for has freed its GPUs."""

    allocation_id: str


@dataclass(frozen=True, slots=True)
class WorkloadStarted:
    """The runtime reports the workload process is up."""


@dataclass(frozen=True, slots=True)
class StartFailed:
    """The workload could not start; `allocation_id`: which member of a gang ("" for rank 0)."""

    reason: str
    allocation_id: str = ""


@dataclass(frozen=True, slots=True)
class WorkloadExited:
    """The workload (for a node: its last pod) is gone; `exit_code` None when unknown.
    `allocation_id`: which member of a gang ("" for rank 0, the only one of a single host)."""

    exit_code: int | None = None
    allocation_id: str = ""


@dataclass(frozen=True, slots=True)
class CompletionReported:
    step: int | None = None


@dataclass(frozen=True, slots=True)
class CheckpointReported:
    """A durable checkpoint of `step`. `save_s` (whole seconds, rounded up) is how long the
    workload measured that save to take, `saves_on_notice` whether it saves when a notice comes;
    both optional (a client that sends neither is a plain reporter). Victim choice believes the
    claim as `domain.capacity.Allocation.notice_save_s` says."""

    step: int
    save_s: int | None = None
    saves_on_notice: bool = False

    def __post_init__(self) -> None:
        if self.save_s is not None and self.save_s < 0:
            raise InvalidRequest(f"a checkpoint's save_s must be ≥ 0, got {self.save_s}")


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """T+0 of a reclaim, decided by the scheduler so that `for_subject` (on-demand) can run.

    `for_account_id` owns `for_subject`; see `shown_for_subject`. `reason` is the victim
    policy's reasoning in words and `policy` the same as figures (`core.state.Preemption`):
    both go into the `Preempted` event's data, for the operator's view, never its message."""

    for_subject: str
    lost_gpu_s: int = 0
    reason: str = ""
    for_account_id: str = ""
    policy: Mapping[str, Any] = field(default_factory=dict, hash=False)
    allocation_id: str = ""  # the victim allocation (a gang's member: the host taken from it)

    def shown_for_subject(self, account_id: str) -> str | None:
        """What the `Preempted` event of an object of `account_id` may name: the subject it was
        reclaimed for when that is the same account's, else nothing (no account ever sees
        another's ids; an unknown owner counts as another)."""
        same = bool(self.for_account_id) and self.for_account_id == account_id
        return self.for_subject if same else None


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
class SignalSent:
    """The shell has sent the drain's SIGTERM to `allocation_id` at `at` (see the module
    docstring): the deadline becomes at least `at` + grace."""

    allocation_id: str
    at: Timestamp


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
    | SignalSent
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


def signal_stamp(
    deadline: Timestamp | None,
    signal_sent_at: Timestamp | None,
    grace_period_s: int,
    sent: SignalSent,
) -> Timestamp | None:
    """The deadline a draining subject gets from its SIGTERM really sent at `sent.at`, or None
    when it keeps the one it has: it was stamped already (once per allocation: a replayed
    signal does not extend it again), or `sent.at` + grace is not later (a deadline is never
    brought forward, so the workload is never told less than it was)."""
    if deadline is None or signal_sent_at is not None:
        return None
    moved = sent.at + grace_period_s
    return moved if moved > deadline else None


def deadline_due(deadline: Timestamp | None, now: Timestamp) -> bool:
    """The deadline is due at `deadline` itself, not one second later."""
    return deadline is not None and now >= deadline


def drain_data(
    window: DrainWindow,
    *,
    for_subject: str | None,
    lost_gpu_s: int,
    reason: str,
    policy: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The data of a `Preempted` (or `Stopping`/`Cordoned`) event; the metadata endpoint answers
    the same times. `reason` and `policy` carry the victim policy's reasoning (words, figures):
    the operator's view shows them; the customer's message never does."""
    data = {
        "notice_at": window.notice_at,
        "deadline": window.deadline,
        "grace_period_s": window.deadline - window.notice_at,
        "for_subject": for_subject,
        "lost_gpu_s": lost_gpu_s,
        "reason": reason,
        **extra,
    }
    if policy:
        data["policy"] = dict(policy)
    return data


def interruption_notice(
    notice_at: Timestamp | None, deadline: Timestamp | None
) -> dict[str, Any] | None:
    """The metadata endpoint's answer: None (404) until a notice exists."""
    if notice_at is None or deadline is None:
        return None
    return {"action": "stop", "notice_at": notice_at, "deadline": deadline}


RECLAIMED = "reclaimed for on-demand work"


def preempted_message(
    window: DrainWindow,
    *,
    kept: str,
    then: str,
    head: str = RECLAIMED,
    who: str = "",
    save: str = "checkpoint",
    end: str = "stopped",
) -> str:
    """What a reclaim does to the customer, in the order it happens: SIGTERM now (to `who`:
    "its pods " for a node), the grace to `save` in (with its deadline, ISO UTC), the `end`;
    what is `kept`; what happens `then`. Never why this victim (the policy's reasoning is in
    the data) and never the on-demand work's owner or id: "on-demand work" is all any account
    is told. (`head` serves the other drains: a stop, a node leaving.)"""
    grace = window.deadline - window.notice_at
    if grace <= 0:
        return f"{head}: {end} now (grace period 0 s); {kept}; {then}"
    return (
        f"{head}: {who}SIGTERM now, {elapsed_words(grace)} to {save} "
        f"(until {iso_utc(window.deadline)}), then {end}; {kept}; {then}"
    )
