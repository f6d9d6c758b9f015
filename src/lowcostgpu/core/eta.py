"""When a queued ticket may start: an honest ETA, or None.

Why so careful: the queue used to assume that a pool turns its whole capacity over once per
"mean runtime of recent runs", which said `~0 s` for a ticket behind an on-demand run that holds
the pool for hours (nothing in the pool was known to end; the recent runs had been short). An
ETA that is wrong is worse than "unknown": a user plans on it. So the estimate is only given
from what is *known*:

- the ticket fits now (enough free GPUs, one host big enough for it, nobody ahead taking them):
  it starts at the next decision, `now`;
- otherwise the known ends of the pool: draining runs, whose SIGKILL deadline bounds when their
  GPUs come back. Those of a drain made *for* someone (an on-demand reclaim) go to that someone,
  not to the queue, and are not counted. The ETA is the first deadline by which the free GPUs
  plus the GPUs known to come back cover the tickets ahead and this one;
- otherwise None ("unknown"): a full pool whose runs have no known end, or a pool held for a
  refused on-demand request (`core.holds`): what frees up there goes to that customer first,
  for as long as they keep asking — which nothing here knows. (The simulator showed why: "now"
  on a held pool was hours off.)

It ignores fragmentation across hosts once the GPUs are counted (a freed GPU on one host and one
on another do not make a 2-GPU host): the simulator measures how far that is from the truth
(docs/scheduling.md, "How honest is the ETA").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lowcostgpu.core.holds import OnDemandHold
from lowcostgpu.core.instance_state import InstanceState
from lowcostgpu.core.snapshot import FleetSnapshot
from lowcostgpu.domain.capacity import PoolKey, Timestamp
from lowcostgpu.domain.status import InstanceStatus

GpusFreed = tuple[Timestamp, int]  # (when at the latest, GPUs) that come back to the queue


def known_ends(
    instances: Mapping[str, InstanceState],
    deadline_order: Iterable[tuple[Timestamp, str]],
    pool: PoolKey,
) -> tuple[GpusFreed, ...]:
    """The GPUs of `pool` known to come back to its queue, by deadline: the draining instances
    (`deadline_order`: the engine's (deadline, id) index of them) not drained for another
    subject. O(draining instances of the fleet), not O(instances)."""
    found: list[GpusFreed] = []
    for deadline, instance_id in deadline_order:
        inst = instances.get(instance_id)
        if inst is None or inst.pool != pool or inst.preempted_for is not None:
            continue
        if inst.status is InstanceStatus.QUEUED or inst.allocation_id is None:
            continue
        found.append((deadline, inst.gpus))
    return tuple(found)


def is_held(holds: Mapping[PoolKey, OnDemandHold], pool: PoolKey, now: Timestamp) -> bool:
    """Whether an on-demand hold is on `pool` now: O(1)."""
    hold = holds.get(pool)
    return hold is not None and hold.until > now


@dataclass(frozen=True, slots=True)
class PoolGpus:
    """A pool's GPUs in all, those free now, the most free on one host, and the GPUs known to
    come back (`known_ends`, by time): what its queue's ETAs are computed from."""

    capacity: int
    free_now: int
    most_free_on_a_host: int = 0
    ends: tuple[GpusFreed, ...] = ()
    held: bool = False  # an on-demand hold is on the pool (`is_held`)

    @classmethod
    def of(
        cls,
        snapshot: FleetSnapshot,
        pool: PoolKey,
        ends: Iterable[GpusFreed] = (),
        held: bool = False,
    ) -> PoolGpus:
        """O(the pool's hosts) for the capacity; the free ones are read off the hosts with free
        GPUs only."""
        capacity = sum(s.host.gpu_count for s in snapshot.hosts_in(pool))
        free = sum(s.free for s in snapshot.hosts_with_free(pool))
        return cls(capacity, free, snapshot.most_free(pool), tuple(sorted(ends)), held)

    def eta(self, ahead: int, gpus: int, now: Timestamp) -> Timestamp | None:
        """When a ticket of `gpus`, with `ahead` GPUs asked before it, may start; None when
        nothing known says. O(known ends)."""
        if self.capacity <= 0 or self.held:
            return None
        wanted = ahead + gpus
        if self.free_now >= wanted and self.most_free_on_a_host >= gpus:
            return now
        back = self.free_now
        for at, freed in self.ends:
            back += freed
            if back >= wanted:
                return max(now + 1, at)  # never "0 s" for a ticket that cannot start now
        return None
