"""What the scheduler is asked and what it answers: tickets, requests, and the plan.

Kueue's lesson: decide on an immutable snapshot (`core.snapshot`), then act. A plan only says what
should happen; the shell writes it and carries it out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lowcostgpu.domain.capacity import CapacityClass, PoolKey, Timestamp


@dataclass(frozen=True, slots=True)
class Ticket:
    """A preemptible request waiting in its pool's FIFO queue.

    `enqueued_at` is the time of the *first* enqueue: a ticket requeued after an interruption
    keeps it, so interrupted work goes back to its old place, not to the back of the line.
    """

    subject_id: str
    pool: PoolKey
    gpus: int
    enqueued_at: Timestamp
    account_id: str = ""
    last_checkpoint_at: Timestamp | None = None
    last_interrupted_at: Timestamp | None = None
    interruption_count: int = 0
    nodes: int = 1  # a multi-node instance (a gang) needs `nodes` hosts with `gpus` free each

    def order_key(self) -> tuple[Timestamp, str]:
        """FIFO order with a deterministic tie-break on id."""
        return (self.enqueued_at, self.subject_id)


@dataclass(frozen=True, slots=True)
class SurvivorHold:
    """The hosts a reclaimed gang kept (`--hold-survivors-s`): until `until`, no other
    preemptible work is placed on them, so that the requeued gang restarts as soon as enough
    other hosts free to make up the ones taken from it."""

    pool: PoolKey
    hosts: tuple[str, ...]
    until: Timestamp


@dataclass(frozen=True, slots=True)
class Request:
    """An on-demand (or standard-node) request, answered synchronously."""

    subject_id: str
    pool: PoolKey
    gpus: int
    account_id: str = ""
    capacity_class: CapacityClass = CapacityClass.ON_DEMAND


@dataclass(frozen=True, slots=True)
class Placement:
    """Start `subject_id` on `gpu_indices` of `host_id`.

    `waits_for` names draining allocations on those GPUs: the workload starts only once they are
    gone (an on-demand request that reclaimed preemptible work starts when its victims have left).
    """

    subject_id: str
    host_id: str
    pool: PoolKey
    gpu_indices: frozenset[int]
    capacity_class: CapacityClass
    account_id: str = ""
    waits_for: frozenset[str] = frozenset()
    enqueued_at: Timestamp | None = None
    # A gang's other members, rank 1 on: (host id, GPU indices) each, on distinct hosts of the
    # pool; `host_id` and `gpu_indices` are rank 0's. All are placed in one plan or none is.
    members: tuple[tuple[str, frozenset[int]], ...] = ()


@dataclass(frozen=True, slots=True)
class Preemption:
    """Reclaim a preemptible allocation so that `for_subject` can run.

    `lost_gpu_s` is the work it loses (GPU-seconds since its last checkpoint); `reason` explains
    the choice in words and `policy` in figures (the policy's name, its cost of this choice and
    of the alternatives, the victim's cost terms): both go into the `Preempted` event's data and
    the operator's view (`/v1/operator/reclaims`), never its message. Both name only this victim
    and the hosts; `for_account_id` owns `for_subject`: the event names it only to that same
    account (tenants never see each other's ids).
    """

    allocation_id: str
    subject_id: str
    host_id: str
    for_subject: str
    lost_gpu_s: int
    reason: str = ""
    for_account_id: str = ""
    policy: Mapping[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True, slots=True)
class Reservation:
    """A host held back for a starving queue head: nothing else from the queue lands on it."""

    pool: PoolKey
    host_id: str
    subject_id: str


@dataclass(frozen=True, slots=True)
class Plan:
    placements: tuple[Placement, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    reservations: tuple[Reservation, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.placements or self.preemptions or self.reservations)

    def merged(self, other: Plan) -> Plan:
        return Plan(
            self.placements + other.placements,
            self.preemptions + other.preemptions,
            self.reservations + other.reservations,
        )
