"""Small builders for scheduler tests: hosts, allocations and tickets with short names."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import combinations
from typing import TYPE_CHECKING

from lowcostgpu.core.state import Request, Ticket
from lowcostgpu.domain.capacity import Allocation, CapacityClass, Host, PoolKey

if TYPE_CHECKING:
    from lowcostgpu.core.snapshot import FleetSnapshot, HostState

POOL = PoolKey("eu", "a100-sxm4")


def host(name: str, gpus: int = 8, pool: PoolKey = POOL) -> Host:
    return Host(id=name, pool=pool, gpu_count=gpus)


def alloc(
    subject: str,
    host_id: str,
    indices: set[int] | range,
    *,
    preemptible: bool = True,
    started_at: int = 0,
    checkpoint_at: int | None = None,
    interrupted_at: int | None = None,
    pool: PoolKey = POOL,
) -> Allocation:
    return Allocation(
        id=f"{subject}@{started_at}",
        subject_id=subject,
        host_id=host_id,
        pool=pool,
        gpu_indices=frozenset(indices),
        capacity_class=CapacityClass.INTERRUPTIBLE if preemptible else CapacityClass.ON_DEMAND,
        started_at=started_at,
        last_checkpoint_at=checkpoint_at,
        last_interrupted_at=interrupted_at,
    )


def ticket(subject: str, gpus: int = 1, enqueued_at: int = 0, pool: PoolKey = POOL) -> Ticket:
    return Ticket(subject_id=subject, pool=pool, gpus=gpus, enqueued_at=enqueued_at)


def on_demand(subject: str, gpus: int = 1, pool: PoolKey = POOL) -> Request:
    return Request(subject_id=subject, pool=pool, gpus=gpus)


def feasible_victim_sets(
    snap: FleetSnapshot, gpus: int, excluded: Callable[[Allocation], bool] | None = None
) -> Iterator[tuple[HostState, tuple[Allocation, ...]]]:
    """Every set of reclaimable allocations (preemptible, not draining, not `excluded`) on one
    host that frees enough GPUs there for `gpus`, by brute force: the tests' oracle."""
    for state in snap.hosts.values():
        candidates = [
            a
            for a in state.allocations
            if a.preemptible and not a.draining and (excluded is None or not excluded(a))
        ]
        for size in range(len(candidates) + 1):
            for subset in combinations(candidates, size):
                if state.free + sum(a.gpus for a in subset) >= gpus:
                    yield state, subset
