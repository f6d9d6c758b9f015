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

A multi-node ticket (a gang, `Ticket.nodes` > 1) is placed only on that many distinct hosts at
once; at the head it reserves that many hosts. A requeued gang keeping its survivors
(`SurvivorHold`) has those hosts kept from every other ticket, and its placement takes them first.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from lowcostgpu.core.eta import GpusFreed, PoolGpus
from lowcostgpu.core.holds import OnDemandHold
from lowcostgpu.core.scheduler import SchedulerConfig, lowest_indices
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.core.state import Placement, Plan, Reservation, SurvivorHold, Ticket
from lowcostgpu.domain.capacity import CapacityClass, PoolKey, Timestamp


def schedule_queue(snapshot: FleetSnapshot, now: Timestamp, config: SchedulerConfig) -> Plan:
    """One pass over every pool's queue."""
    plan = Plan()
    for pool in sorted(snapshot.queues):
        plan = plan.merged(schedule_pool(snapshot, pool, now, config))
    return plan


ON_DEMAND_HOLD = "on-demand hold"  # the subject named by a hold's reservation
_NOTHING = Plan()


def schedule_pool(
    snapshot: FleetSnapshot,
    pool: PoolKey,
    now: Timestamp,
    config: SchedulerConfig,
    hold: OnDemandHold | None = None,
    survivors: Mapping[str, SurvivorHold] | None = None,
) -> Plan:
    """`survivors`: the pool's requeued gangs holding their surviving hosts (in force at
    `now`): those hosts' free GPUs are kept from every other ticket."""
    held = hold is not None and hold.until > now
    if not held and not any(snapshot.pool_free.get(pool, {}).values()):
        return _NOTHING  # no free GPU in the pool: a full fleet's every input, O(host sizes)
    queue = snapshot.queue(pool)
    free = _Free(snapshot, pool)
    placements: list[Placement] = []
    reservations: list[Reservation] = []
    if held:
        assert hold is not None
        _hold_back(free, pool, hold.gpus, ON_DEMAND_HOLD, reservations)
    kept = _keep_survivors(free, survivors or {})
    head_seen = False
    examined_after_head = 0
    for ticket in queue:
        if not free.hosts and not kept:
            break
        if head_seen:
            examined_after_head += 1
            if examined_after_head > config.backfill_window:
                break
        own = _give_back(free, kept.pop(ticket.subject_id, {}))
        fits = ticket.gpus <= free.largest
        host_ids = _fit(free, ticket.gpus, ticket.nodes, own) if fits else None
        if host_ids is not None:
            placements.append(_place(ticket, host_ids, free))
            continue
        for host_id in own:  # still held for it: hidden from the tickets behind it again
            free.set(host_id, [])
        if head_seen:
            continue
        head_seen = True
        if now - ticket.enqueued_at >= config.head_reservation_after_s:
            for _ in range(ticket.nodes - len(own)):  # a gang's head holds what it needs
                _hold_back(free, pool, ticket.gpus, ticket.subject_id, reservations)
    return Plan(placements=tuple(placements), reservations=tuple(reservations))


def _keep_survivors(
    free: _Free, survivors: Mapping[str, SurvivorHold]
) -> dict[str, dict[str, list[int]]]:
    """Hide the held hosts' free GPUs from the pass; what each gang holds, to give it back (a
    gang whose held hosts have no free GPU now keeps nothing: the pass may still stop early)."""
    kept: dict[str, dict[str, list[int]]] = {}
    for subject_id in sorted(survivors):
        for host_id in survivors[subject_id].hosts:
            if host_id in free.snapshot.hosts and free.free_of(host_id) > 0:
                kept.setdefault(subject_id, {})[host_id] = free.indices(host_id)
                free.set(host_id, [])
    return kept


def _give_back(free: _Free, hosts: Mapping[str, list[int]]) -> list[str]:
    """A gang's held hosts, visible again to its own placement; their ids."""
    for host_id, indices in hosts.items():
        free.set(host_id, indices)
    return sorted(hosts)


def _fit(free: _Free, gpus: int, nodes: int, own: Sequence[str] = ()) -> list[str] | None:
    """Best-fit hosts for `nodes` members of `gpus` GPUs each, on distinct hosts, or None: a
    gang is placed whole or not at all (no partial gang ever holds GPUs). Hosts held for it
    (`own`) come first. O(nodes) searches."""
    if nodes == 1:
        host_id = free.best_fit(gpus)
        return None if host_id is None else [host_id]
    chosen = [(h, free.indices(h)) for h in own if free.free_of(h) >= gpus][:nodes]
    for host_id, _ in chosen:
        free.set(host_id, [])
    while len(chosen) < nodes and gpus <= free.largest:
        host_id = free.best_fit(gpus)
        if host_id is None:
            break
        chosen.append((host_id, free.indices(host_id)))
        free.set(host_id, [])  # one member per host: hidden from the next search
    for host_id, indices in reversed(chosen):  # the pass's view as it was; `_place` takes them
        free.set(host_id, indices)
    return [host_id for host_id, _ in chosen] if len(chosen) == nodes else None


class _Free:
    """A pool's free GPUs as one pass changes them: the snapshot's index of (free GPUs, host id)
    per host size (`FleetSnapshot.pool_free`), read through the hosts this pass placed on or
    reserved. Each question costs a bisection per host size plus the hosts the pass changed,
    not a look at every free host of the pool."""

    __slots__ = ("changed", "extra", "hosts", "largest", "sized", "sizes", "snapshot")

    def __init__(self, snapshot: FleetSnapshot, pool: PoolKey) -> None:
        self.snapshot = snapshot
        self.sized = snapshot.pool_free.get(pool, {})
        self.sizes = snapshot.pool_sizes.get(pool, ())
        self.changed: dict[str, list[int]] = {}  # host id -> its free GPU indices now
        self.extra: dict[int, list[tuple[int, str]]] = {}  # per size: (free, id) of changed hosts
        self.hosts = sum(map(len, self.sized.values()))  # hosts with free GPUs
        self.largest = self._largest()  # the most free GPUs on one host

    def free_of(self, host_id: str) -> int:
        indices = self.changed.get(host_id)
        return self.snapshot.hosts[host_id].free if indices is None else len(indices)

    def indices(self, host_id: str) -> list[int]:
        indices = self.changed.get(host_id)
        return sorted(self.snapshot.hosts[host_id].free_indices) if indices is None else indices

    def _first(self, size: int, at_least: tuple[int, str]) -> tuple[int, str] | None:
        """The least entry ≥ `at_least` among the hosts of `size`, as this pass sees them."""
        base = next(
            (e for e in self.sized[size].from_item(at_least) if e[1] not in self.changed), None
        )
        extra = self.extra.get(size)
        if extra:
            at = bisect_left(extra, at_least)
            if at < len(extra) and (base is None or extra[at] < base):
                return extra[at]
        return base

    def _top(self, size: int) -> int:
        """The most free GPUs on one host of `size`, as this pass sees them."""
        index = self.sized[size]
        if not self.changed:  # as the pass starts (once per engine input): the index's last
            return index.last[-1][0] if index.last else 0
        top = next((e[0] for e in reversed(index) if e[1] not in self.changed), 0)
        extra = self.extra.get(size)
        return max(top, extra[-1][0]) if extra else top

    def _largest(self) -> int:
        return max((self._top(size) for size in self.sized), default=0)

    def best_fit(self, gpus: int) -> str | None:
        """The host with the fewest free GPUs that still fit `gpus` (ties: host id)."""
        best: tuple[int, str] | None = None
        for size in self.sized:
            if size >= gpus:
                entry = self._first(size, (gpus, ""))
                if entry is not None and (best is None or entry < best):
                    best = entry
        return None if best is None else best[1]

    def closest(self, gpus: int) -> str | None:
        """The host closest to fitting `gpus`: most free GPUs now among the hosts with at least
        `gpus` GPUs, then host id; None if no host is that big."""
        best: tuple[int, str] | None = None  # (-free, host id)
        for size in self.sized:
            if size >= gpus and (top := self._top(size)) > 0:
                entry = self._first(size, (top, ""))
                assert entry is not None
                if best is None or (-entry[0], entry[1]) < best:
                    best = (-entry[0], entry[1])
        if best is not None:
            return best[1]
        return min((host_id for size, host_id in self.sizes if size >= gpus), default=None)

    def set(self, host_id: str, indices: list[int]) -> None:
        """The host's free GPU indices are now `indices`."""
        size = self.snapshot.hosts[host_id].host.gpu_count
        old = self.free_of(host_id)
        if old > 0:
            self.hosts -= 1
            if host_id in self.changed:
                extra = self.extra[size]
                del extra[bisect_left(extra, (old, host_id))]
        self.changed[host_id] = indices
        if indices:
            self.hosts += 1
            insort(self.extra.setdefault(size, []), (len(indices), host_id))
        self.largest = self._largest()


def _place(ticket: Ticket, host_ids: list[str], free: _Free) -> Placement:
    """The ticket's placement on these hosts (rank 0 on the first), taken from `free`."""
    members: list[tuple[str, frozenset[int]]] = []
    for host_id in host_ids:
        indices = free.indices(host_id)
        taken = lowest_indices(frozenset(indices), ticket.gpus)
        free.set(host_id, [i for i in indices if i not in taken])
        members.append((host_id, taken))
    (host_id, taken), *others = members
    return Placement(
        subject_id=ticket.subject_id,
        host_id=host_id,
        pool=ticket.pool,
        gpu_indices=taken,
        capacity_class=CapacityClass.INTERRUPTIBLE,
        account_id=ticket.account_id,
        enqueued_at=ticket.enqueued_at,
        members=tuple(others),
    )


def _hold_back(
    free: _Free, pool: PoolKey, gpus: int, subject_id: str, reservations: list[Reservation]
) -> bool:
    """Reserve the host closest to fitting `gpus` (most free GPUs now, then host id): its free
    GPUs leave `free`, and the reservation joins `reservations`. False if no host is big enough."""
    chosen = free.closest(gpus)
    if chosen is None:
        return False
    if free.free_of(chosen) > 0:
        free.set(chosen, [])
    reservations.append(Reservation(pool=pool, host_id=chosen, subject_id=subject_id))
    return True


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """Where a ticket stands: its 1-based position, the GPUs asked by tickets ahead, an ETA
    (`core.eta`: None when nothing known says when it may start)."""

    subject_id: str
    position: int
    gpus_ahead: int
    eta_at: Timestamp | None


def queue_status(
    snapshot: FleetSnapshot, pool: PoolKey, now: Timestamp, ends: Iterable[GpusFreed] = ()
) -> list[QueueEntry]:
    """Positions and ETAs for a pool's whole queue: O(queue · known ends). (`queue_entry`
    answers one ticket's without the walk.) The ETA is `core.eta`'s: from what is known to end
    (`ends`, the pool's `known_ends`), else None."""
    gpus = PoolGpus.of(snapshot, pool, ends)
    entries: list[QueueEntry] = []
    ahead = 0
    for position, ticket in enumerate(snapshot.queue(pool), start=1):
        eta_at = gpus.eta(ahead, ticket.gpus, now)
        entries.append(QueueEntry(ticket.subject_id, position, ahead, eta_at))
        ahead += ticket.gpus
    return entries


def queue_entry(
    snapshot: FleetSnapshot,
    pool: PoolKey,
    key: tuple[Timestamp, str],
    now: Timestamp,
    gpus: PoolGpus | None = None,
) -> QueueEntry | None:
    """The entry `queue_status` gives the ticket of `key` — its (first enqueue time, subject id),
    which is where the FIFO keeps it — or None when no such ticket is queued in `pool`.

    O(chunks + CHUNK) for the place (`TicketQueue.place`), plus O(the pool's hosts) for its
    capacity unless `gpus` (the pool's `PoolGpus`, with its known ends, taken once for many
    lookups) is given; without it no end is known.
    """
    place = snapshot.queue(pool).place(key)
    if place is None:
        return None
    gpus = PoolGpus.of(snapshot, pool) if gpus is None else gpus
    eta_at = gpus.eta(place.gpus_ahead, place.ticket.gpus, now)
    return QueueEntry(place.ticket.subject_id, place.index + 1, place.gpus_ahead, eta_at)
