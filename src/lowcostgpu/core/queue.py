"""The preemptible queue: FIFO per pool, with a reservation so big requests do not starve.

One pass over a pool's queue, oldest ticket first (a requeued ticket keeps its first enqueue time,
so interrupted work goes back to its old place). Each ticket is placed best-fit on free GPUs if it
fits. The first ticket that does not fit is the *head*: later, smaller tickets may still backfill
around it, but once the head has waited `head_reservation_after_s` one host is reserved for it —
the one closest to fitting it — and no later ticket may land there. That host's free GPUs can then
only grow (new preemptible work goes elsewhere), so the head runs as soon as that host drains,
however many small tickets arrive behind it. On-demand requests are not bound by the reservation.

An on-demand hold (`core.holds`) reserves a host the same way, before the queue is looked at: the
host closest to fitting the refused on-demand request gets no new preemptible work while it lasts.
"""

from __future__ import annotations

from dataclasses import dataclass

from lowcostgpu.core.holds import OnDemandHold
from lowcostgpu.core.scheduler import SchedulerConfig, lowest_indices
from lowcostgpu.core.snapshot import FleetSnapshot, HostState
from lowcostgpu.core.state import Placement, Plan, Reservation, Ticket
from lowcostgpu.domain.capacity import CapacityClass, PoolKey, Timestamp


def schedule_queue(snapshot: FleetSnapshot, now: Timestamp, config: SchedulerConfig) -> Plan:
    """One pass over every pool's queue."""
    plan = Plan()
    for pool in sorted(snapshot.queues):
        plan = plan.merged(schedule_pool(snapshot, pool, now, config))
    return plan


ON_DEMAND_HOLD = "on-demand hold"  # the subject named by a hold's reservation


def schedule_pool(
    snapshot: FleetSnapshot,
    pool: PoolKey,
    now: Timestamp,
    config: SchedulerConfig,
    hold: OnDemandHold | None = None,
) -> Plan:
    queue = snapshot.queue(pool)
    free = {s.host.id: sorted(s.free_indices) for s in snapshot.hosts_with_free(pool)}
    placements: list[Placement] = []
    reservations: list[Reservation] = []
    if hold is not None and hold.until > now:
        _hold_back(snapshot.hosts_in(pool), free, pool, hold.gpus, ON_DEMAND_HOLD, reservations)
    head_seen = False
    examined_after_head = 0
    largest_block = max((len(i) for i in free.values()), default=0)
    for ticket in queue:
        if not free:
            break
        if head_seen:
            examined_after_head += 1
            if examined_after_head > config.backfill_window:
                break
        host_id = _best_fit(free, ticket.gpus) if ticket.gpus <= largest_block else None
        if host_id is not None:
            placements.append(_place(ticket, host_id, free))
            largest_block = max((len(i) for i in free.values()), default=0)
            continue
        if head_seen:
            continue
        head_seen = True
        if now - ticket.enqueued_at >= config.head_reservation_after_s and _hold_back(
            snapshot.hosts_in(pool), free, pool, ticket.gpus, ticket.subject_id, reservations
        ):
            largest_block = max((len(i) for i in free.values()), default=0)
    return Plan(placements=tuple(placements), reservations=tuple(reservations))


def _best_fit(free: dict[str, list[int]], gpus: int) -> str | None:
    best: tuple[int, str] | None = None
    for host_id, indices in free.items():
        if len(indices) >= gpus and (best is None or (len(indices), host_id) < best):
            best = (len(indices), host_id)
    return best[1] if best else None


def _place(ticket: Ticket, host_id: str, free: dict[str, list[int]]) -> Placement:
    indices = free[host_id]
    taken = lowest_indices(frozenset(indices), ticket.gpus)
    rest = [i for i in indices if i not in taken]
    if rest:
        free[host_id] = rest
    else:
        del free[host_id]
    return Placement(
        subject_id=ticket.subject_id,
        host_id=host_id,
        pool=ticket.pool,
        gpu_indices=taken,
        capacity_class=CapacityClass.INTERRUPTIBLE,
        account_id=ticket.account_id,
        enqueued_at=ticket.enqueued_at,
    )


def _hold_back(
    hosts: list[HostState],
    free: dict[str, list[int]],
    pool: PoolKey,
    gpus: int,
    subject_id: str,
    reservations: list[Reservation],
) -> bool:
    """Reserve the host closest to fitting `gpus` (most free GPUs now, then host id): its free
    GPUs leave `free`, and the reservation joins `reservations`. False if no host is big enough."""
    fitting = [s for s in hosts if s.host.gpu_count >= gpus]
    if not fitting:
        return False
    chosen = min(fitting, key=lambda s: (-len(free.get(s.host.id, ())), s.host.id))
    free.pop(chosen.host.id, None)
    reservations.append(Reservation(pool=pool, host_id=chosen.host.id, subject_id=subject_id))
    return True


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """Where a ticket stands: its 1-based position, the GPUs asked by tickets ahead, an ETA."""

    subject_id: str
    position: int
    gpus_ahead: int
    eta_at: Timestamp | None


def queue_status(
    snapshot: FleetSnapshot, pool: PoolKey, now: Timestamp, mean_runtime_s: int | None
) -> list[QueueEntry]:
    """Positions and ETAs for a pool's whole queue: O(queue). (`queue_entry` answers one
    ticket's without the walk.)

    The ETA assumes the pool turns its whole capacity over once per `mean_runtime_s` (the mean
    runtime of recent allocations in the pool, measured by the caller); without that figure there
    is no honest ETA, and it is None.
    """
    gpus = PoolGpus.of(snapshot, pool)
    entries: list[QueueEntry] = []
    ahead = 0
    for position, ticket in enumerate(snapshot.queue(pool), start=1):
        entries.append(
            QueueEntry(
                ticket.subject_id, position, ahead, gpus.eta(ahead, ticket, now, mean_runtime_s)
            )
        )
        ahead += ticket.gpus
    return entries


def queue_entry(
    snapshot: FleetSnapshot,
    pool: PoolKey,
    key: tuple[Timestamp, str],
    now: Timestamp,
    mean_runtime_s: int | None,
    gpus: PoolGpus | None = None,
) -> QueueEntry | None:
    """The entry `queue_status` gives the ticket of `key` — its (first enqueue time, subject id),
    which is where the FIFO keeps it — or None when no such ticket is queued in `pool`.

    O(chunks + CHUNK) for the place (`TicketQueue.place`), plus O(the pool's hosts) for its
    capacity unless `gpus` (the pool's `PoolGpus`, taken once for many lookups) is given.
    """
    place = snapshot.queue(pool).place(key)
    if place is None:
        return None
    gpus = PoolGpus.of(snapshot, pool) if gpus is None else gpus
    eta_at = gpus.eta(place.gpus_ahead, place.ticket, now, mean_runtime_s)
    return QueueEntry(place.ticket.subject_id, place.index + 1, place.gpus_ahead, eta_at)


@dataclass(frozen=True, slots=True)
class PoolGpus:
    """A pool's GPUs in all and those free now: what its queue's ETAs are computed from."""

    capacity: int
    free_now: int

    @classmethod
    def of(cls, snapshot: FleetSnapshot, pool: PoolKey) -> PoolGpus:
        """O(the pool's hosts) for the capacity; the free ones are read off the hosts with free
        GPUs only."""
        capacity = sum(s.host.gpu_count for s in snapshot.hosts_in(pool))
        return cls(capacity, sum(s.free for s in snapshot.hosts_with_free(pool)))

    def eta(
        self, ahead: int, ticket: Ticket, now: Timestamp, mean_runtime_s: int | None
    ) -> Timestamp | None:
        """When `ticket`, with `ahead` GPUs asked before it, may start: None without a runtime
        figure or without capacity."""
        if mean_runtime_s is None or self.capacity <= 0:
            return None
        missing = max(0, ahead + ticket.gpus - self.free_now)
        return now + -(-missing * mean_runtime_s // self.capacity)
