"""The operator's queue depth and reclaims over time (`GET /v1/operator/history`): the store's
durable records for one window, handed to the pure `core.fleet_history`.

What is read, and why it is enough. The window's events only: the store filters them by time
(`Store.events(since=, until=)`), so a day's history costs a day of events, not the whole log.
An instance's state when the window opened comes from its events in the window or, without any,
from its record now; for the few that neither settles (stopped or deleted in the window with
nothing telling before that), slices of older events are read, each twice as long as the one
before, until each has its last telling event (`lookback_s` says how far that went; usually 0).
Instances (the live ones; a deleted one by id when the window names it) and cluster nodes are
read as records. Everything comes from the store, so the history survives a restart.
"""

from __future__ import annotations

from dataclasses import dataclass

from lowcostgpu.app.plane import ControlPlane
from lowcostgpu.core import fleet_history as fh
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import NotFound
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.store import EventRecord, Store

PAGE = 5000


@dataclass(frozen=True, slots=True)
class FleetHistory:
    now: Timestamp
    window: fh.Window
    pools: list[str]
    points: list[fh.Point]
    events_read: int  # the window's events and any older ones read to settle its start
    lookback_s: int  # how far before the window older events were read (0: not at all)


def window_events(store: Store, since: Timestamp, until: Timestamp) -> list[EventRecord]:
    """Every event with `since <= at < until`, in seq order, read in pages."""
    found: list[EventRecord] = []
    cursor = 0
    while True:
        page = store.events(after_seq=cursor, since=since, until=until, limit=PAGE)
        found += page
        if len(page) < PAGE or page[-1].seq is None:
            return found
        cursor = page[-1].seq


def fleet_history(plane: ControlPlane, window_s: int, step_s: int) -> FleetHistory:
    """Queue depth and reclaims per step of the `window_s` before now, per pool and in all."""
    now = plane.clock.now()
    window = fh.Window.ending(now, window_s, step_s)
    store = plane.store
    # Records first, then events: an instance that changes in between has an event in the
    # window, and its state at the start then comes from that event, not from the record.
    live = {s.state.id: s.state for s in store.instances()}
    nodes = [n.state for n in store.nodes(include_removed=True)]
    events = window_events(store, window.start, window.end)
    marks = _marks(events)
    pool_of = {i: str(s.pool) for i, s in live.items()}
    _add_pools(store, pool_of, {m.object_id for m in marks})
    waiting_now = [i for i, s in live.items() if s.status is InstanceStatus.QUEUED]
    known, unknown = fh.waiting_at_start(marks, waiting_now)
    older, lookback_s = _settle(store, window, known, unknown)
    waiting = fh.stretches(marks, known, pool_of, window.start) + _node_stretches(nodes, window)
    node_pool = {n.id: str(n.pool) for n in nodes}
    reclaims = [
        fh.Reclaim(pool_of.get(e.object_id) or node_pool[e.object_id], e.at)
        for e in events
        if e.reason is Reason.PREEMPTED and (e.object_id in pool_of or e.object_id in node_pool)
    ]
    pools = sorted({str(h.pool) for h in plane.hosts})
    points = fh.history(window, now, waiting, reclaims, pools)
    return FleetHistory(now, window, pools, points, len(events) + older, lookback_s)


def _marks(events: list[EventRecord]) -> list[fh.Mark]:
    return [fh.Mark(e.object_id, e.at, e.reason) for e in events if e.object_kind == "instance"]


def _add_pools(store: Store, pool_of: dict[str, str], ids: set[str]) -> None:
    """The pools of instances the window names that are no longer live (deleted): by id."""
    for instance_id in sorted(ids - pool_of.keys()):
        try:
            pool_of[instance_id] = str(store.instance(instance_id).state.pool)
        except NotFound:
            continue


def _settle(
    store: Store, window: fh.Window, known: dict[str, bool], unknown: set[str]
) -> tuple[int, int]:
    """Looks back, in slices twice as long each time, for the last telling event of each
    `unknown` instance, and records in `known` whether it waited when the window opened; the
    events read and how far back."""
    if not unknown:
        return 0, 0
    first = store.events(limit=1)
    oldest = first[0].at if first else window.start
    until, span, read = window.start, window.end - window.start, 0
    while unknown and until > oldest:
        since = max(oldest, until - span)
        slice_ = window_events(store, since, until)
        read += len(slice_)
        found = fh.last_known(_marks(slice_))
        for instance_id in unknown & found.keys():
            known[instance_id] = found[instance_id]
        unknown -= found.keys()
        until, span = since, span * 2
    return read, window.start - until  # one never seen waiting before: it did not wait


def _node_stretches(nodes: list[NodeState], window: fh.Window) -> list[fh.Stretch]:
    """The preemptible nodes' waits (creation → ready or removed) that reach into the window."""
    found = []
    for n in nodes:
        if not n.preemptible:
            continue
        stretch = fh.node_stretch(str(n.pool), n.created_at, n.started_at, n.removed_at)
        if stretch.start < window.end and (stretch.end is None or stretch.end > window.start):
            found.append(stretch)
    return found
