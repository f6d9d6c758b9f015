"""What the operator's console shows about the fleet over time: utilisation on-demand vs
interruptible, reclaims, revenue, per time bucket, computed from what the store already keeps.

Usage records (closed metering intervals) are spread over the buckets they overlap in proportion
to the overlap, so a bucket's GPU-seconds are what was metered in it; reclaims are `Preempted`
events (instances and cluster nodes); revenue is the rated usage (the amount each record was
charged), exact, rounded to 1/10000 $ per bucket for display.

What it costs: the nodes and instance counts read the engine state of the last decision
(`ControlPlane.snapshot()`, live objects only, no store read); reclaims read the window's events
(`fleet_history.window_events`); the usage series reads the window's usage summed per interval
by the store, through its index on the interval start (O(intervals in the window) here, the
window's records inside the database); the all-time revenue is the totals the store keeps per
account, kind, resource and class (`Store.usage_totals`): O(those lines), whatever the history.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

from lowcostgpu.app.fleet_history import window_events
from lowcostgpu.app.plane import ControlPlane
from lowcostgpu.core.metering import MAX_INTERVAL_S, IntervalUsage
from lowcostgpu.core.rating import exact_amount, total_exact
from lowcostgpu.domain.capacity import CapacityClass, Timestamp
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.events import Reason
from lowcostgpu.domain.status import NodeStatus

MAX_BUCKETS = 1000
MIN_BUCKET_S = 60
SHOWN = Decimal("0.0001")


@dataclass
class Bucket:
    """One time bucket [start, start + bucket_s) of the whole fleet."""

    start: Timestamp
    on_demand_gpu_s: float = 0.0
    interruptible_gpu_s: float = 0.0
    storage_gb_s: float = 0.0
    reclaims: int = 0
    revenue: Fraction = field(default_factory=Fraction)


@dataclass(frozen=True, slots=True)
class Window:
    start: Timestamp
    end: Timestamp
    bucket_s: int

    @classmethod
    def ending(cls, now: Timestamp, window_s: int, bucket_s: int) -> Window:
        """The `window_s` before now, in whole buckets aligned to `bucket_s`."""
        if bucket_s < MIN_BUCKET_S or window_s < bucket_s:
            raise InvalidRequest(
                f"bucket_s must be at least {MIN_BUCKET_S} and at most window_s",
                hint="e.g. window_s=86400&bucket_s=3600",
            )
        if window_s // bucket_s > MAX_BUCKETS:
            raise InvalidRequest(
                f"window_s / bucket_s is {window_s // bucket_s}, more than {MAX_BUCKETS} buckets",
                hint="take larger buckets or a shorter window",
            )
        end = (now // bucket_s + 1) * bucket_s
        return cls(end - (window_s // bucket_s) * bucket_s, end, bucket_s)

    def buckets(self) -> list[Bucket]:
        return [Bucket(t) for t in range(self.start, self.end, self.bucket_s)]


def fleet_gpus(plane: ControlPlane) -> int:
    return sum(h.gpu_count for h in plane.hosts)


def series(plane: ControlPlane, window: Window) -> list[Bucket]:
    """The fleet's buckets in `window`: metered usage, revenue and reclaims in each. A record
    overlaps the window if it starts less than an interval (at most `MAX_INTERVAL_S`) before it;
    the store sums the window's records per interval (O(intervals) here)."""
    buckets = window.buckets()
    intervals = plane.store.usage_by_interval(since=window.start - MAX_INTERVAL_S, until=window.end)
    for usage in intervals:
        _spread(usage, buckets, window, exact_amount(usage, plane.catalog))
    for event in window_events(plane.store, window.start, window.end):  # not the whole log
        if event.reason is Reason.PREEMPTED:
            buckets[(event.at - window.start) // window.bucket_s].reclaims += 1
    return buckets


def _spread(record: IntervalUsage, buckets: list[Bucket], window: Window, amount: Fraction) -> None:
    length = record.interval_end - record.interval_start
    if length <= 0:
        return
    first = max(0, (record.interval_start - window.start) // window.bucket_s)
    for bucket in buckets[first:]:
        if bucket.start >= record.interval_end:
            break
        overlap = min(record.interval_end, bucket.start + window.bucket_s) - max(
            record.interval_start, bucket.start
        )
        if overlap <= 0:
            continue
        share = Fraction(overlap, length)
        quantity = float(record.quantity_s * share)
        if record.kind == "storage":
            bucket.storage_gb_s += quantity
        elif record.capacity_class is CapacityClass.ON_DEMAND:
            bucket.on_demand_gpu_s += quantity
        else:
            bucket.interruptible_gpu_s += quantity
        bucket.revenue += amount * share


def shown(amount: Fraction) -> str:
    """An exact amount as a decimal string rounded half-even to 1/10000 $."""
    value = Decimal(amount.numerator) / Decimal(amount.denominator)
    return f"{value.quantize(SHOWN, ROUND_HALF_EVEN):f}"


def revenue_total(plane: ControlPlane) -> Fraction:
    """Every usage record ever rated: what customers were charged in all (from the totals)."""
    return total_exact(plane.store.usage_totals(), plane.catalog)


def node_gpus(plane: ControlPlane) -> dict[tuple[str, str], dict[str, int]]:
    """GPUs that cluster nodes hold per pool (region, GPU type), standard and preemptible: nodes
    are not instances, so the pools' instance counts leave them out. Off the snapshot:
    O(live nodes)."""
    held: dict[tuple[str, str], dict[str, int]] = {}
    for node in plane.snapshot().nodes.values():
        if node.host_id is None or node.status is NodeStatus.REMOVED:
            continue  # still waiting in the queue, or gone: holds nothing
        counts = held.setdefault(
            (node.pool.region, node.pool.gpu_type), {"standard": 0, "preemptible": 0}
        )
        counts["preemptible" if node.preemptible else "standard"] += node.gpus
    return held


def instance_counts(plane: ControlPlane) -> dict[str, int]:
    """Live instances by status (aggregates: no ids, no accounts), off the snapshot: finished
    instances have left the live state and are not counted. O(live instances)."""
    statuses = Counter(str(i.status) for i in plane.snapshot().instances.values())
    return dict(sorted(statuses.items()))
