"""Read-only views the API shows: a queued instance's place and ETA, the fleet, interruptions.

Nothing here writes, and nothing here scans history: each view reads the immutable engine state
of the last decision (`ControlPlane.snapshot()`: live instances, clusters, nodes and the fleet,
no lock, no store read) or an indexed store query, and says what it costs. Figures that describe
the whole fleet (free GPUs, queue depths, interruption statistics) are aggregates: they name no
instance and no account.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from statistics import median
from typing import Any

from lowcostgpu.app.plane import ControlPlane
from lowcostgpu.core.eta import PoolGpus, is_held, known_ends
from lowcostgpu.core.queue import QueueEntry, queue_entry
from lowcostgpu.domain.capacity import Allocation, CapacityClass, PoolKey, Timestamp
from lowcostgpu.domain.errors import NotFound
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.store import EventRecord, Store

STATS_WINDOW_S = 7 * 24 * 3600  # the interruption statistics' window
EVENT_PAGE = 10_000  # Preempted events read per store query


def queue_entries(plane: ControlPlane, instance_ids: Iterable[str]) -> dict[str, QueueEntry]:
    """The place in its pool's queue (position, GPUs ahead, ETA) of each of these instances that
    is queued; the others are left out.

    Read off the snapshot, where node tickets share the queue: per instance O(chunks + CHUNK)
    (`TicketQueue.place`, found by the ticket's key), plus once per pool O(hosts) for its
    capacity and O(draining instances) for what is known to end (`core.eta.known_ends`).
    A pool held for a refused on-demand request has no ETA (`core.eta`).
    """
    state = plane.snapshot()
    now = plane.clock.now()
    pools: dict[PoolKey, PoolGpus] = {}
    found: dict[str, QueueEntry] = {}
    for instance_id in instance_ids:
        inst = state.instances.get(instance_id)
        if inst is None or inst.status is not InstanceStatus.QUEUED or inst.enqueued_at is None:
            continue
        if inst.pool not in pools:
            order = state.index.instance_deadline_order
            ends = known_ends(state.instances, order, inst.pool)
            held = is_held(state.holds, inst.pool, now)
            pools[inst.pool] = PoolGpus.of(state.fleet, inst.pool, ends, held)
        key = (inst.enqueued_at, inst.id)
        entry = queue_entry(state.fleet, inst.pool, key, now, pools[inst.pool])
        if entry is not None:
            found[instance_id] = entry
    return found


def queue_entry_of(plane: ControlPlane, instance_id: str) -> QueueEntry | None:
    """One instance's `queue_entries`: None unless it is queued."""
    return queue_entries(plane, (instance_id,)).get(instance_id)


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
    """Each pool now, off the snapshot's fleet (the one the scheduler decides on, so free is
    what nothing holds). GPUs held count instances and cluster nodes alike: a standard node is
    on-demand capacity, a preemptible node interruptible. Cost: O(hosts + allocations) and
    O(chunks) per queue (its length and GPUs are kept per chunk), no store read."""
    fleet = plane.snapshot().fleet
    views = []
    for pool in sorted({h.pool for h in plane.hosts}):
        hosts = fleet.hosts_in(pool)
        held = [a for h in hosts for a in h.allocations]
        queue = fleet.queue(pool)
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
                queued_gpus=queue.gpus,
            )
        )
    return views


def _gpus(allocations: list[Allocation], capacity_class: CapacityClass) -> int:
    return sum(a.gpus for a in allocations if a.capacity_class is capacity_class)


def interruption_statistics(
    plane: ControlPlane, gpu_types: Collection[str] | None = None, window_s: int = STATS_WINDOW_S
) -> list[dict[str, Any]]:
    """Per GPU type (the fleet's, or `gpu_types`), over the last `window_s`: the instances'
    interruptions (`Preempted` events), interruptions per hour per interruptible instance of
    the type — live now or interrupted in the window: wall hours stand in for running hours —
    and the median time between interruptions: how long each interrupted run had been running
    since its (re)start (`data["run_s"]`), the simulator's definition (`sim.metrics`), so one
    interruption is enough. None only when no instance of the type was interrupted in the
    window. (It used to be the gap between two interruptions of the *same* instance, which needs
    an instance interrupted twice within the window: rare, since a restart is shielded for its
    minimum runtime — so `fleet` showed `-` in practice. Events written before `run_s` was in
    their data still count that way.)

    The one reader of these figures (`/v1/fleet`, the operator's fleet, `/metrics`, the
    workloads' metadata endpoint). Cost: O(Preempted events in the window), read by reason,
    kind and time (`Store.events` filters in the store), plus one `Store.instance` read per
    instance whose events predate `data["gpu_type"]`, plus O(live instances) of the snapshot.
    """
    now = plane.clock.now()
    types = sorted({h.pool.gpu_type for h in plane.hosts} if gpu_types is None else gpu_types)
    wanted = set(types)
    type_of: dict[str, str | None] = {}
    times: dict[str, list[Timestamp]] = {}  # events without `run_s`, per instance
    runs: dict[str, list[int]] = {t: [] for t in types}
    counts: dict[str, int] = dict.fromkeys(types, 0)
    interrupted: dict[str, set[str]] = {t: set() for t in types}
    for event in _preempted(plane.store, now - window_s):
        gpu_type = _gpu_type_of(plane.store, event, type_of)
        if gpu_type not in wanted:
            continue
        assert gpu_type is not None
        counts[gpu_type] += 1
        interrupted[gpu_type].add(event.object_id)
        run_s = event.data.get("run_s")
        if isinstance(run_s, int) and not isinstance(run_s, bool):
            runs[gpu_type].append(run_s)
        else:
            times.setdefault(event.object_id, []).append(event.at)
    live: dict[str, set[str]] = {t: set() for t in types}
    for inst in plane.snapshot().instances.values():
        if inst.capacity_class is CapacityClass.INTERRUPTIBLE and inst.pool.gpu_type in live:
            live[inst.pool.gpu_type].add(inst.id)
    hours = window_s / 3600
    out = []
    for gpu_type in types:
        series = (sorted(t) for i, t in times.items() if type_of[i] == gpu_type)
        spans = runs[gpu_type] + [b - a for t in series for a, b in pairwise(t)]
        instances = len(live[gpu_type] | interrupted[gpu_type])
        out.append(
            {
                "gpu_type": gpu_type,
                "window_s": window_s,
                "interruptions": counts[gpu_type],
                "interruptions_per_hour": counts[gpu_type] / hours / max(1, instances),
                "median_time_between_interruptions_s": round(median(spans)) if spans else None,
            }
        )
    return out


def instance_interruption_statistics(plane: ControlPlane, instance_id: str) -> dict[str, Any]:
    """`interruption_statistics` of this instance's GPU type: what the metadata endpoint gives
    a workload for its adaptive checkpoint interval. The type comes off the snapshot, or one
    store read when the instance is not live."""
    inst = plane.snapshot().instances.get(instance_id)
    pool = inst.pool if inst is not None else plane.store.instance(instance_id).state.pool
    (row,) = interruption_statistics(plane, gpu_types=(pool.gpu_type,))
    return row


def _preempted(store: Store, since: Timestamp) -> Iterator[EventRecord]:
    """The instances' `Preempted` events since `since`, page by page in seq order."""
    after = 0
    while True:
        page = store.events(
            reason=str(Reason.PREEMPTED),
            object_kind="instance",
            since=since,
            after_seq=after,
            limit=EVENT_PAGE,
        )
        yield from page
        if len(page) < EVENT_PAGE or page[-1].seq is None:
            return
        after = page[-1].seq


def _gpu_type_of(store: Store, event: EventRecord, known: dict[str, str | None]) -> str | None:
    """The GPU type a `Preempted` event is about: in its data; events written before it was
    put there name only the instance, which is read then (once per instance; None when the
    instance is gone)."""
    if event.object_id not in known:
        found = event.data.get("gpu_type")
        if not isinstance(found, str):
            try:
                found = store.instance(event.object_id).state.pool.gpu_type
            except NotFound:
                found = None
        known[event.object_id] = found
    return known[event.object_id]
