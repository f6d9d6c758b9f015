"""The fleet snapshot the scheduler decides on.

Immutable, and shaped for the scheduler's questions: per host its allocations and free GPU indices,
per pool its hosts and its FIFO queue. `apply_plan` and the small update functions return a new
snapshot that shares every untouched host and queue with the old one, so keeping the snapshot up to
date costs a copy of two small dicts and a slice of one queue, not a rebuild of the fleet.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

from lowcostgpu.core.state import Placement, Plan, Ticket
from lowcostgpu.domain.capacity import Allocation, Host, PoolKey, Timestamp
from lowcostgpu.domain.errors import Conflict, InvalidRequest, NotFound


@dataclass(frozen=True, slots=True)
class HostState:
    """A host with the allocations on it and what follows from them, computed once."""

    host: Host
    allocations: tuple[Allocation, ...]
    free_indices: frozenset[int]
    reclaimable_gpus: int  # GPUs held by preemptible, not yet draining allocations
    newest_progress: Timestamp | None  # latest `progress_since` among those allocations

    @classmethod
    def of(cls, host: Host, allocations: Iterable[Allocation] = ()) -> HostState:
        allocs = tuple(sorted(allocations, key=lambda a: a.id))
        held: set[int] = set()
        for alloc in allocs:
            held |= alloc.gpu_indices
        candidates = [a for a in allocs if a.preemptible and not a.draining]
        return cls(
            host=host,
            allocations=allocs,
            free_indices=frozenset(range(host.gpu_count)) - held,
            reclaimable_gpus=sum(a.gpus for a in candidates),
            newest_progress=max((a.progress_mark for a in candidates), default=None),
        )

    @property
    def free(self) -> int:
        return 0 if self.host.cordoned else len(self.free_indices)

    def with_allocations(self, allocations: Iterable[Allocation]) -> HostState:
        return HostState.of(self.host, allocations)


def _queue_key(ticket: Ticket) -> tuple[Timestamp, str]:
    return ticket.order_key()


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """Hosts with their allocations, and one FIFO queue per pool, at one moment."""

    hosts: Mapping[str, HostState]
    pool_hosts: Mapping[PoolKey, tuple[str, ...]]
    queues: Mapping[PoolKey, tuple[Ticket, ...]]

    @classmethod
    def build(
        cls,
        hosts: Iterable[Host],
        allocations: Iterable[Allocation] = (),
        tickets: Iterable[Ticket] = (),
    ) -> FleetSnapshot:
        host_list = list(hosts)
        by_host: dict[str, list[Allocation]] = {h.id: [] for h in host_list}
        if len(by_host) != len(host_list):
            raise InvalidRequest("duplicate host id in the fleet")
        for alloc in allocations:
            if alloc.host_id not in by_host:
                raise NotFound(f"allocation {alloc.id} is on unknown host {alloc.host_id}")
            by_host[alloc.host_id].append(alloc)
        pool_hosts: dict[PoolKey, list[str]] = {}
        for h in host_list:
            pool_hosts.setdefault(h.pool, []).append(h.id)
        queues: dict[PoolKey, list[Ticket]] = {pool: [] for pool in pool_hosts}
        for ticket in tickets:
            queues.setdefault(ticket.pool, []).append(ticket)
        return cls(
            hosts={h.id: HostState.of(h, by_host[h.id]) for h in host_list},
            pool_hosts={p: tuple(sorted(ids)) for p, ids in pool_hosts.items()},
            queues={p: tuple(sorted(q, key=_queue_key)) for p, q in queues.items()},
        )

    # Reading -----------------------------------------------------------------------------------

    def allocations(self) -> Iterator[Allocation]:
        for state in self.hosts.values():
            yield from state.allocations

    def allocation(self, allocation_id: str) -> Allocation:
        for alloc in self.allocations():
            if alloc.id == allocation_id:
                return alloc
        raise NotFound(f"no allocation {allocation_id}")

    def tickets(self) -> Iterator[Ticket]:
        for queue in self.queues.values():
            yield from queue

    def queue(self, pool: PoolKey) -> tuple[Ticket, ...]:
        return self.queues.get(pool, ())

    def hosts_in(self, pool: PoolKey) -> list[HostState]:
        return [self.hosts[h] for h in self.pool_hosts.get(pool, ())]

    def largest_host_gpus(self, pool: PoolKey) -> int:
        return max((s.host.gpu_count for s in self.hosts_in(pool)), default=0)

    # Updating (each returns a new snapshot) ----------------------------------------------------

    def with_host_allocations(self, changes: Mapping[str, Iterable[Allocation]]) -> FleetSnapshot:
        hosts = dict(self.hosts)
        for host_id, allocs in changes.items():
            hosts[host_id] = hosts[host_id].with_allocations(allocs)
        return replace(self, hosts=hosts)

    def with_queue(self, pool: PoolKey, queue: tuple[Ticket, ...]) -> FleetSnapshot:
        queues = dict(self.queues)
        queues[pool] = queue
        return replace(self, queues=queues)


def enqueue(snapshot: FleetSnapshot, ticket: Ticket) -> FleetSnapshot:
    """Put a ticket in its pool's queue at the place its original enqueue time gives it."""
    if ticket.pool not in snapshot.pool_hosts:
        raise NotFound(
            f"no capacity of {ticket.pool.gpu_type} in region {ticket.pool.region}",
            hint="see `lowcostgpu fleet` for the pools this fleet has",
        )
    largest = snapshot.largest_host_gpus(ticket.pool)
    if not 1 <= ticket.gpus <= largest:
        raise InvalidRequest(
            f"{ticket.gpus} GPUs cannot fit one host of pool {ticket.pool}",
            hint=f"ask for 1 to {largest} GPUs",
        )
    queue = snapshot.queue(ticket.pool)
    if any(t.subject_id == ticket.subject_id for t in queue):
        raise Conflict(f"{ticket.subject_id} is already queued")
    at = bisect_left(queue, ticket.order_key(), key=_queue_key)
    return snapshot.with_queue(ticket.pool, (*queue[:at], ticket, *queue[at:]))


def dequeue(snapshot: FleetSnapshot, pool: PoolKey, subject_ids: set[str]) -> FleetSnapshot:
    """Take tickets out of a queue (placed, stopped or deleted)."""
    queue = snapshot.queue(pool)
    kept = tuple(t for t in queue if t.subject_id not in subject_ids)
    return snapshot if len(kept) == len(queue) else snapshot.with_queue(pool, kept)


def allocation_id_for(subject_id: str, now: Timestamp) -> str:
    """Deterministic allocation ids: a subject holds at most one allocation at a time."""
    return f"{subject_id}@{now}"


def apply_plan(snapshot: FleetSnapshot, plan: Plan, now: Timestamp) -> FleetSnapshot:
    """The snapshot after the plan: victims draining, placements holding their GPUs."""
    touched: dict[str, list[Allocation]] = {}

    def allocs_of(host_id: str) -> list[Allocation]:
        if host_id not in touched:
            touched[host_id] = list(snapshot.hosts[host_id].allocations)
        return touched[host_id]

    for pre in plan.preemptions:
        allocs = allocs_of(pre.host_id)
        for i, alloc in enumerate(allocs):
            if alloc.id == pre.allocation_id:
                allocs[i] = replace(alloc, draining=True)
    placed_by_pool: dict[PoolKey, set[str]] = {}
    for placement in plan.placements:
        allocs_of(placement.host_id).append(_allocation_for(placement, now))
        placed_by_pool.setdefault(placement.pool, set()).add(placement.subject_id)
    result = snapshot.with_host_allocations(touched) if touched else snapshot
    for pool, subjects in placed_by_pool.items():
        result = dequeue(result, pool, subjects)
    return result


def _allocation_for(placement: Placement, now: Timestamp) -> Allocation:
    return Allocation(
        id=allocation_id_for(placement.subject_id, now),
        subject_id=placement.subject_id,
        host_id=placement.host_id,
        pool=placement.pool,
        gpu_indices=placement.gpu_indices,
        capacity_class=placement.capacity_class,
        started_at=now,
        account_id=placement.account_id,
        waits_for=placement.waits_for,
    )


def release(snapshot: FleetSnapshot, allocation_id: str) -> FleetSnapshot:
    """The allocation's workload is gone: its GPUs are free, and nobody waits for it any more."""
    alloc = snapshot.allocation(allocation_id)
    remaining = [
        replace(a, waits_for=a.waits_for - {allocation_id}) if allocation_id in a.waits_for else a
        for a in snapshot.hosts[alloc.host_id].allocations
        if a.id != allocation_id
    ]
    return snapshot.with_host_allocations({alloc.host_id: remaining})


def update_allocation(snapshot: FleetSnapshot, allocation: Allocation) -> FleetSnapshot:
    """Replace an allocation by a new value of it (a checkpoint report, a drain mark)."""
    allocs = snapshot.hosts[allocation.host_id].allocations
    if not any(a.id == allocation.id for a in allocs):
        raise NotFound(f"no allocation {allocation.id} on host {allocation.host_id}")
    new = [allocation if a.id == allocation.id else a for a in allocs]
    return snapshot.with_host_allocations({allocation.host_id: new})
