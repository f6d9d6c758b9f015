"""Small builders for scheduler tests: hosts, allocations and tickets with short names."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import combinations
from typing import TYPE_CHECKING

from lowcostgpu.core.state import Request, Ticket
from lowcostgpu.domain.capacity import Allocation, CapacityClass, Host, PoolKey

if TYPE_CHECKING:
    from lowcostgpu.core.engine_state import EngineState
    from lowcostgpu.core.host_state import HostState
    from lowcostgpu.core.snapshot import FleetSnapshot

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


def assert_holds_kept(before: EngineState, after: EngineState, now: int) -> None:
    """No preemptible work of another subject is placed, between `before` and `after` (one
    engine step at `now`), on a host held then for a requeued gang, unless the hold ended in
    that step (the gang was placed); on-demand work may take it."""
    held = {
        h: subject
        for subject, hold in before.index.survivor_holds.items()
        if hold.until > now
        for h in hold.hosts
    }
    placed_before = {a.id for a in before.fleet.allocations()}
    for a in after.fleet.allocations():
        if a.id not in placed_before and a.preemptible and a.host_id in held:
            holder = held[a.host_id]
            still = holder in after.index.survivor_holds  # else its hold ended in this step
            assert a.subject_id == holder or not still, f"{a.subject_id} took {a.host_id}"
