"""The fleet snapshot the scheduler decides on.

Immutable, and shaped for the scheduler's questions: per host its allocations and free GPU indices,
per pool its hosts and its FIFO queue. `apply_plan` and the small update functions return a new
snapshot that shares every untouched host and queue with the old one, so keeping the snapshot up to
date costs O(what changed): the host map is persistent (`immutables.Map`), and the per-pool host
indexes (free GPUs, newest progress mark) are sorted chunked tuples (`core.sorted_chunks`) of which
an update copies one chunk — not a rebuild of the fleet, nor a copy of a pool's hosts.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

import immutables

from lowcostgpu.core.fifo import TicketQueue
from lowcostgpu.core.host_state import HostState
from lowcostgpu.core.sorted_chunks import SortedChunks
from lowcostgpu.core.state import Placement, Plan, Ticket
from lowcostgpu.domain.capacity import Allocation, Host, PoolKey, Timestamp
from lowcostgpu.domain.errors import Conflict, InvalidRequest, NotFound

Entry = tuple[int, str]  # (a number the index orders by, host id)
Index = SortedChunks[Entry]
EMPTY_INDEX: Index = SortedChunks()


def _moved(order: Index, old: Entry | None, new: Entry | None) -> Index:
    """The sorted order with `old` taken out and `new` put in: O(chunk + chunks)."""
    if old is not None:
        order = order.removed(old)
    if new is not None:
        order = order.inserted(new)
    return order


EMPTY_QUEUE = TicketQueue()


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """Hosts with their allocations, and one FIFO queue per pool, at one moment."""

    hosts: immutables.Map[str, HostState]
    pool_hosts: Mapping[PoolKey, tuple[str, ...]]
    queues: Mapping[PoolKey, TicketQueue]
    # Per pool and host size (GPUs), the hosts with free GPUs as (free GPUs, host id), sorted:
    # best fit is a bisection, the most free GPUs the last entry, whatever the pool's size.
    pool_free: Mapping[PoolKey, Mapping[int, Index]]
    # Per pool, the hosts with reclaimable GPUs ordered by newest progress mark, latest first:
    # victim search walks this order and stops as soon as no later host can be cheaper.
    pool_by_mark: Mapping[PoolKey, Index]
    pool_largest_host: Mapping[PoolKey, int]  # GPUs of the pool's biggest host
    # Per pool, (host size, least host id of that size) by size: the host a reservation falls
    # back on when no host big enough has free GPUs. The hosts never change in a snapshot.
    pool_sizes: Mapping[PoolKey, tuple[Entry, ...]] = field(default_factory=dict)
    # Per pool, (free GPUs, reclaimable GPUs) summed over its hosts: what a refusal quotes,
    # kept by each update from the hosts it changed instead of summed over the pool's hosts.
    pool_totals: Mapping[PoolKey, tuple[int, int]] = field(default_factory=dict)

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
        states = {h.id: HostState.of(h, by_host[h.id]) for h in host_list}
        pool_free: dict[PoolKey, dict[int, Index]] = {}
        pool_sizes: dict[PoolKey, dict[int, str]] = {}
        for p, ids in pool_hosts.items():
            sized: dict[int, list[Entry]] = {}
            for host_id in sorted(ids):
                state = states[host_id]
                size = state.host.gpu_count
                sized.setdefault(size, [])
                pool_sizes.setdefault(p, {}).setdefault(size, host_id)
                if state.free > 0:
                    sized[size].append((state.free, host_id))
            pool_free[p] = {size: SortedChunks.of(e) for size, e in sorted(sized.items())}
        return cls(
            hosts=immutables.Map(states),
            pool_hosts={p: tuple(sorted(ids)) for p, ids in pool_hosts.items()},
            queues={p: TicketQueue.of(q) for p, q in queues.items()},
            pool_free=pool_free,
            pool_largest_host={
                p: max(states[h].host.gpu_count for h in ids) for p, ids in pool_hosts.items()
            },
            pool_by_mark={
                p: SortedChunks.of(e for h in ids if (e := states[h].mark_entry()) is not None)
                for p, ids in pool_hosts.items()
            },
            pool_sizes={p: tuple(sorted(sizes.items())) for p, sizes in pool_sizes.items()},
            pool_totals={
                p: (
                    sum(states[h].free for h in ids),
                    sum(states[h].reclaimable_gpus for h in ids),
                )
                for p, ids in pool_hosts.items()
            },
        )

    # Reading -----------------------------------------------------------------------------------

    def allocations(self) -> Iterator[Allocation]:
        for state in self.hosts.values():
            yield from state.allocations

    def allocation(self, allocation_id: str, host_id: str | None = None) -> Allocation:
        """Find an allocation; with its host given, without scanning the fleet."""
        state = self.hosts.get(host_id) if host_id is not None else None
        for alloc in state.allocations if state is not None else self.allocations():
            if alloc.id == allocation_id:
                return alloc
        raise NotFound(f"no allocation {allocation_id}")

    def tickets(self) -> Iterator[Ticket]:
        for queue in self.queues.values():
            yield from queue

    def queue(self, pool: PoolKey) -> TicketQueue:
        return self.queues.get(pool, EMPTY_QUEUE)

    def hosts_in(self, pool: PoolKey) -> list[HostState]:
        return [self.hosts[h] for h in self.pool_hosts.get(pool, ())]

    def hosts_with_free(self, pool: PoolKey) -> list[HostState]:
        """Every host of the pool with free GPUs, by host id: O(those hosts)."""
        ids = sorted(h for index in self.pool_free.get(pool, {}).values() for _, h in index)
        return [self.hosts[h] for h in ids]

    def best_fit_free(self, pool: PoolKey, gpus: int) -> HostState | None:
        """The host with the fewest free GPUs that still fit `gpus` (ties: host id), as
        `scheduler.best_fit` over `hosts_with_free` finds it: a bisection per host size."""
        best: Entry | None = None
        for size, index in self.pool_free.get(pool, {}).items():
            if size >= gpus:
                entry = next(index.from_item((gpus, "")), None)
                if entry is not None and (best is None or entry < best):
                    best = entry
        return None if best is None else self.hosts[best[1]]

    def most_free(self, pool: PoolKey) -> int:
        """The most free GPUs on one host of the pool: O(host sizes)."""
        return max(
            (next(reversed(index))[0] for index in self.pool_free.get(pool, {}).values() if index),
            default=0,
        )

    def hosts_by_mark(self, pool: PoolKey) -> Iterator[HostState]:
        """Hosts with reclaimable GPUs, the one with the most recent progress mark first."""
        for _, host_id in self.pool_by_mark.get(pool, ()):
            yield self.hosts[host_id]

    def largest_host_gpus(self, pool: PoolKey) -> int:
        return self.pool_largest_host.get(pool, 0)

    # Updating (each returns a new snapshot) ----------------------------------------------------

    def with_host_allocations(self, changes: Mapping[str, Iterable[Allocation]]) -> FleetSnapshot:
        hosts = self.hosts.mutate()
        pool_free = dict(self.pool_free)
        pool_by_mark = dict(self.pool_by_mark)
        pool_totals: dict[PoolKey, tuple[int, int]] | None = None  # copied on first change
        for host_id, allocs in changes.items():
            old = hosts[host_id]
            state = old.with_allocations(allocs)
            hosts[host_id] = state
            pool = state.host.pool
            if old.free != state.free or old.reclaimable_gpus != state.reclaimable_gpus:
                if pool_totals is None:
                    pool_totals = dict(self.pool_totals)
                free, reclaimable = pool_totals[pool]
                pool_totals[pool] = (
                    free + state.free - old.free,
                    reclaimable + state.reclaimable_gpus - old.reclaimable_gpus,
                )
            if old.free != state.free:
                sized = dict(pool_free[pool])
                size = state.host.gpu_count
                sized[size] = _moved(
                    sized[size],
                    (old.free, host_id) if old.free > 0 else None,
                    (state.free, host_id) if state.free > 0 else None,
                )
                pool_free[pool] = sized
            old_mark, new_mark = old.mark_entry(), state.mark_entry()
            if old_mark != new_mark:
                pool_by_mark[pool] = _moved(pool_by_mark[pool], old_mark, new_mark)
        totals = self.pool_totals if pool_totals is None else pool_totals
        return self._with(hosts.finish(), self.queues, pool_free, pool_by_mark, totals)

    def with_queue(self, pool: PoolKey, queue: TicketQueue) -> FleetSnapshot:
        queues = dict(self.queues)
        queues[pool] = queue
        return self._with(self.hosts, queues, self.pool_free, self.pool_by_mark, self.pool_totals)

    def _with(
        self,
        hosts: immutables.Map[str, HostState],
        queues: Mapping[PoolKey, TicketQueue],
        pool_free: Mapping[PoolKey, Mapping[int, Index]],
        pool_by_mark: Mapping[PoolKey, Index],
        pool_totals: Mapping[PoolKey, tuple[int, int]],
    ) -> FleetSnapshot:
        """`replace` of what an update changes, without its walk over the fields (one per
        update, and updates are most of an engine step)."""
        return FleetSnapshot(
            hosts=hosts,
            pool_hosts=self.pool_hosts,
            queues=queues,
            pool_free=pool_free,
            pool_by_mark=pool_by_mark,
            pool_largest_host=self.pool_largest_host,
            pool_sizes=self.pool_sizes,
            pool_totals=pool_totals,
        )


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
    if ticket.nodes > 1:  # O(the pool's hosts), for a gang only
        hosts = (snapshot.hosts[h].host for h in snapshot.pool_hosts[ticket.pool])
        big = sum(1 for host in hosts if host.gpu_count >= ticket.gpus)
        if ticket.nodes > big:
            raise InvalidRequest(
                f"{ticket.nodes} nodes of {ticket.gpus} GPUs: pool {ticket.pool} has only {big} "
                f"host(s) with {ticket.gpus} GPUs or more",
                hint=f"ask for at most {big} nodes, or fewer GPUs per node",
            )
    queue = snapshot.queue(ticket.pool)
    if queue.find(ticket.order_key()) is not None:
        raise Conflict(f"{ticket.subject_id} is already queued")
    return snapshot.with_queue(ticket.pool, queue.inserted(ticket))


def dequeue(snapshot: FleetSnapshot, pool: PoolKey, subject_ids: set[str]) -> FleetSnapshot:
    """Take tickets out of a queue by subject (a stop or a delete while queued)."""
    queue = snapshot.queue(pool)
    keys = [t.order_key() for t in queue if t.subject_id in subject_ids]
    return snapshot.with_queue(pool, queue.removed(keys)) if keys else snapshot


def dequeue_tickets(snapshot: FleetSnapshot, tickets: Iterable[Ticket]) -> FleetSnapshot:
    """Take these tickets out of their queues, found by their order key: O(log queue) each, not
    the scan of `dequeue` (a ticket not queued is ignored)."""
    by_pool: dict[PoolKey, list[tuple[Timestamp, str]]] = {}
    for ticket in tickets:
        by_pool.setdefault(ticket.pool, []).append(ticket.order_key())
    for pool, keys in by_pool.items():
        snapshot = snapshot.with_queue(pool, snapshot.queue(pool).removed(keys))
    return snapshot


def dequeue_placed(
    snapshot: FleetSnapshot, pool: PoolKey, placed: list[Placement]
) -> FleetSnapshot:
    """Take placed tickets out of their queue, found by their enqueue time without a scan."""
    keys = [(p.enqueued_at, p.subject_id) for p in placed if p.enqueued_at is not None]
    return snapshot.with_queue(pool, snapshot.queue(pool).removed(keys)) if keys else snapshot


def allocation_id_for(subject_id: str, now: Timestamp, placement_number: int = 0) -> str:
    """Deterministic allocation ids, unique per placement of a subject.

    The time alone is not enough: an instance stopped and resumed within one second is placed
    twice in that second, and the second run must not share the first one's id (its start effect
    would be taken for the first one's, already done, and never carried out).
    """
    return (
        f"{subject_id}@{now}" if placement_number == 0 else f"{subject_id}@{now}.{placement_number}"
    )


MEMBER_MARK = ":r"  # `member_allocation_id`: a gang member's id is its rank 0's, then this


def member_allocation_id(allocation_id: str, rank: int) -> str:
    """The allocation id of a gang's member of `rank` (rank 0 keeps the instance's own id): one
    per host, so that each member is started, signalled, reported and released on its own."""
    return allocation_id if rank == 0 else f"{allocation_id}{MEMBER_MARK}{rank}"


def placed_at(allocation_id: str) -> Timestamp:
    """When an allocation was placed, read back from its id (a gang member's: its rank 0's)."""
    _, _, suffix = allocation_id.rpartition("@")
    suffix = suffix.partition(MEMBER_MARK)[0]
    at, _, number = suffix.partition(".")
    if not at.isdigit() or not (number == "" or number.isdigit()):
        raise InvalidRequest(f"not an allocation id: {allocation_id!r}")
    return int(at)


def placement_number(allocation_id: str) -> int:
    """Which placement of its subject an allocation is (0: the first), read back from its id
    (`allocation_id_for`); for an instance this is the restart count of the run it holds."""
    placed_at(allocation_id)  # refuses what is no allocation id
    number = allocation_id.rpartition("@")[2].partition(MEMBER_MARK)[0].partition(".")[2]
    return int(number) if number else 0


def apply_plan(
    snapshot: FleetSnapshot,
    plan: Plan,
    now: Timestamp,
    allocation_ids: Mapping[str, str] | None = None,
) -> FleetSnapshot:
    """The snapshot after the plan: victims draining, placements holding their GPUs.

    `allocation_ids` names each placement's allocation by subject (the engine knows how often a
    subject was placed before); a subject missing from it gets `allocation_id_for(subject, now)`.
    """
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
    placed_by_pool: dict[PoolKey, list[Placement]] = {}
    for placement in plan.placements:
        allocation_id = (allocation_ids or {}).get(placement.subject_id)
        for alloc in _allocations_for(placement, now, allocation_id):
            allocs_of(alloc.host_id).append(alloc)
        placed_by_pool.setdefault(placement.pool, []).append(placement)
    result = snapshot.with_host_allocations(touched) if touched else snapshot
    for pool, placed in placed_by_pool.items():
        result = dequeue_placed(result, pool, placed)
    return result


def _allocations_for(
    placement: Placement, now: Timestamp, allocation_id: str | None = None
) -> list[Allocation]:
    """The placement's allocation, or a gang's, one per member host (rank 0 first)."""
    base = allocation_id or allocation_id_for(placement.subject_id, now)
    hosts = ((placement.host_id, placement.gpu_indices), *placement.members)
    gang_gpus = sum(len(indices) for _, indices in hosts) if placement.members else 0
    return [
        Allocation(
            id=member_allocation_id(base, rank),
            subject_id=placement.subject_id,
            host_id=host_id,
            pool=placement.pool,
            gpu_indices=indices,
            capacity_class=placement.capacity_class,
            started_at=now,
            account_id=placement.account_id,
            waits_for=placement.waits_for if rank == 0 else frozenset(),
            gang_gpus=gang_gpus,
        )
        for rank, (host_id, indices) in enumerate(hosts)
    ]


def release(
    snapshot: FleetSnapshot, allocation_id: str, host_id: str | None = None
) -> FleetSnapshot:
    """The allocation's workload is gone: its GPUs are free, and nobody waits for it any more."""
    alloc = snapshot.allocation(allocation_id, host_id)
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
