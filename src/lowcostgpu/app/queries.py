"""Read-only views the API shows: a queued instance's place and ETA, the fleet, prices.

Nothing here writes. Figures that describe the whole fleet (free GPUs, queue depths, interruption
statistics) are aggregates: they name no instance and no account.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from statistics import median
from typing import Any

from lowcostgpu.app.clusters import ClusterRecords
from lowcostgpu.app.plane import ControlPlane
from lowcostgpu.core import engine
from lowcostgpu.core.lifecycle import InstanceState
from lowcostgpu.core.queue import QueueEntry, queue_status
from lowcostgpu.domain.capacity import Allocation, CapacityClass, PoolKey, Timestamp
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus

RUNTIME_SAMPLE = 200  # recent runs per pool the ETA's mean runtime is taken from


def mean_runtime_s(instances: list[InstanceState], pool: PoolKey) -> int | None:
    """The mean length of the pool's recent finished runs: how fast its capacity turns over."""
    lengths = [
        run.billed_until - run.started_at
        for inst in instances
        if inst.pool == pool
        for run in inst.runs
        if run.billed_until is not None
    ][-RUNTIME_SAMPLE:]
    return round(sum(lengths) / len(lengths)) if lengths else None


def queue_entries(plane: ControlPlane) -> dict[str, QueueEntry]:
    """Every queued instance's place in its pool's queue, with an ETA when one is honest."""
    stored = [s.state for s in plane.store.instances(include_deleted=True)]
    live = [i for i in stored if i.status is not InstanceStatus.DELETED]
    fleet = engine.state_from_instances(plane.hosts, live).fleet
    now = plane.clock.now()
    found: dict[str, QueueEntry] = {}
    for pool in sorted({i.pool for i in live if i.status is InstanceStatus.QUEUED}):
        for entry in queue_status(fleet, pool, now, mean_runtime_s(stored, pool)):
            found[entry.subject_id] = entry
    return found


@dataclass(frozen=True, slots=True)
class PoolView:
    region: str
    gpu_type: str
    hosts: int
    gpus: int
    free_gpus: int
    on_demand_gpus: int
    interruptible_gpus: int
    queue_depth: int
    queued_gpus: int


def pools(plane: ControlPlane) -> list[PoolView]:
    """Each pool now. GPUs held count instances and cluster nodes alike (a standard node is
    on-demand capacity, a preemptible node interruptible), read off the same fleet snapshot the
    scheduler decides on, so free is what nothing holds."""
    instances = [s.state for s in plane.store.instances()]
    records = ClusterRecords.load(plane.store)
    fleet = engine.state_from_instances(
        plane.hosts, instances, clusters=records.cluster_states(), nodes=records.node_states()
    ).fleet
    views = []
    for pool in sorted({h.pool for h in plane.hosts}):
        hosts = fleet.hosts_in(pool)
        held = [a for h in hosts for a in h.allocations]
        queue = list(fleet.queue(pool))
        views.append(
            PoolView(
                region=pool.region,
                gpu_type=pool.gpu_type,
                hosts=len(hosts),
                gpus=sum(h.host.gpu_count for h in hosts),
                free_gpus=sum(h.free for h in hosts),
                on_demand_gpus=_gpus(held, CapacityClass.ON_DEMAND),
                interruptible_gpus=_gpus(held, CapacityClass.INTERRUPTIBLE),
                queue_depth=len(queue),
                queued_gpus=sum(t.gpus for t in queue),
            )
        )
    return views


def _gpus(allocations: list[Allocation], capacity_class: CapacityClass) -> int:
    return sum(a.gpus for a in allocations if a.capacity_class is capacity_class)


def interruption_statistics(plane: ControlPlane, since: Timestamp = 0) -> list[dict[str, Any]]:
    """Per GPU type: interruptions since `since`, and the median time between two interruptions
    of the same instance (None until some instance was interrupted twice)."""
    type_of = {
        s.state.id: s.state.pool.gpu_type for s in plane.store.instances(include_deleted=True)
    }
    times: dict[str, list[int]] = {}
    for e in plane.store.events(limit=1_000_000):
        if e.reason is Reason.PREEMPTED and e.object_id in type_of and e.at >= since:
            times.setdefault(e.object_id, []).append(e.at)
    out = []
    for gpu_type in sorted({h.pool.gpu_type for h in plane.hosts}):
        series = [t for i, t in times.items() if type_of[i] == gpu_type]
        gaps = [b - a for t in series for a, b in pairwise(t)]
        out.append(
            {
                "gpu_type": gpu_type,
                "interruptions": sum(len(t) for t in series),
                "median_time_between_interruptions_s": round(median(gaps)) if gaps else None,
            }
        )
    return out
