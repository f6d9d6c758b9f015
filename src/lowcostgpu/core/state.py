"""The snapshot the core decides on, and the plan it returns.

Kueue's lesson: decide on an immutable snapshot, then act. Nothing in the core mutates a snapshot;
`apply_plan` returns a new one, so a caller can compare before and after, and a plan that fails
to be written simply leaves the old snapshot as it was.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from lowcostgpu.domain.capacity import Allocation, CapacityClass, Host, PoolKey, Timestamp


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

    def order_key(self) -> tuple[Timestamp, str]:
        """FIFO order with a deterministic tie-break on id."""
        return (self.enqueued_at, self.subject_id)


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


@dataclass(frozen=True, slots=True)
class Preemption:
    """Reclaim a preemptible allocation so that `for_subject` can run.

    `lost_gpu_s` is the work it loses (GPU-seconds since its last checkpoint); `reason` explains
    the choice in words a user can read in the `Preempted` event.
    """

    allocation_id: str
    subject_id: str
    for_subject: str
    lost_gpu_s: int
    reason: str = ""


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


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """Hosts, the allocations on them and the queued tickets, at one moment."""

    hosts: Mapping[str, Host]
    allocations: Mapping[str, Allocation] = field(default_factory=dict)
    tickets: Mapping[str, Ticket] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        hosts: Iterable[Host],
        allocations: Iterable[Allocation] = (),
        tickets: Iterable[Ticket] = (),
    ) -> FleetSnapshot:
        return cls(
            hosts=MappingProxyType({h.id: h for h in hosts}),
            allocations=MappingProxyType({a.id: a for a in allocations}),
            tickets=MappingProxyType({t.subject_id: t for t in tickets}),
        )

    def pools(self) -> list[PoolKey]:
        return sorted({h.pool for h in self.hosts.values()})

    def allocations_on(self, host_id: str) -> list[Allocation]:
        return [a for a in self.allocations.values() if a.host_id == host_id]

    def with_changes(
        self,
        *,
        allocations: Mapping[str, Allocation] | None = None,
        tickets: Mapping[str, Ticket] | None = None,
        hosts: Mapping[str, Host] | None = None,
    ) -> FleetSnapshot:
        return replace(
            self,
            hosts=MappingProxyType(dict(hosts)) if hosts is not None else self.hosts,
            allocations=(
                MappingProxyType(dict(allocations)) if allocations is not None else self.allocations
            ),
            tickets=MappingProxyType(dict(tickets)) if tickets is not None else self.tickets,
        )
