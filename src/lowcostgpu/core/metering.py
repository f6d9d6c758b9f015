"""Metering: usage spans cut into idempotent per-interval records.

A record is keyed by `(subject_id, kind, interval_start)`; the store inserts it or ignores it if
the key exists. That is safe only if a key always carries the same content, so a record is emitted
only for an interval that is *closed* at `now` (its end ≤ now): nothing can be added to a closed
interval afterwards. A span that ends mid-interval is billed when that interval closes (at most
`interval_s` later), together with any later run of the same subject in the same interval (an
instance interrupted at 10:00:20 and restarted at 10:00:50 gets one record of 10 + 10 s, not two
records fighting for one key). So any sequence of ticks — repeated, late, missing for hours —
bills every span to the second, once.

Intervals are aligned to multiples of `interval_s` since the epoch. `metered_through` says up to
when a subject's usage is already in the store; metering starts there (and never re-bills before
it, even if `interval_s` was changed between ticks).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Final, Literal

from lowcostgpu.core.lifecycle import InstanceState
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.domain.capacity import CapacityClass, Timestamp
from lowcostgpu.domain.errors import InvalidRequest

DEFAULT_INTERVAL_S: Final = 60
MIN_INTERVAL_S: Final = 60
MAX_INTERVAL_S: Final = 120

UsageKind = Literal["gpu", "storage"]
MeterKey = tuple[str, UsageKind]
"""(subject_id, kind): the unit `metered_through` is kept for."""


@dataclass(frozen=True, slots=True)
class UsageSpan:
    """`quantity` GPUs (kind gpu, `resource` the GPU type) or GB (kind storage, `resource` the
    volume), used from `start` to `end` (None: still in use)."""

    subject_id: str
    account_id: str
    kind: UsageKind
    resource: str
    quantity: int
    capacity_class: CapacityClass | None
    start: Timestamp
    end: Timestamp | None = None

    def __post_init__(self) -> None:
        if self.quantity < 0:
            raise InvalidRequest(f"usage of {self.subject_id}: quantity must be ≥ 0")
        if self.end is not None and self.end < self.start:
            raise InvalidRequest(
                f"usage of {self.subject_id}: ends at {self.end}, before its start {self.start}"
            )

    @property
    def meter_key(self) -> MeterKey:
        return (self.subject_id, self.kind)


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """Usage of one subject in one closed interval [interval_start, interval_end).

    `seconds` is the wall time used in the interval, `quantity_s` the GPU-seconds or GB-seconds
    (what is billed), `quantity` the largest quantity seen in it.
    """

    subject_id: str
    account_id: str
    kind: UsageKind
    resource: str
    capacity_class: CapacityClass | None
    interval_start: Timestamp
    interval_end: Timestamp
    seconds: int
    quantity: int
    quantity_s: int

    @property
    def key(self) -> tuple[str, UsageKind, Timestamp]:
        return (self.subject_id, self.kind, self.interval_start)


@dataclass(frozen=True, slots=True)
class UsageTotal:
    """An account's billed quantity of one kind, resource and class, summed over records: what
    an invoice line is made of (its price is linear in the quantity, so summing first is exact).
    A store sums them where the records are (`Store.usage_totals`), not in Python."""

    account_id: str
    kind: UsageKind
    resource: str
    capacity_class: CapacityClass | None
    quantity_s: int


def usage_totals(records: Iterable[UsageRecord]) -> list[UsageTotal]:
    """The records summed per (account, kind, resource, class), in that order (a missing class
    sorts as "None")."""
    sums: dict[tuple[str, UsageKind, str, CapacityClass | None], int] = defaultdict(int)
    for r in records:
        sums[(r.account_id, r.kind, r.resource, r.capacity_class)] += r.quantity_s
    totals = [UsageTotal(a, k, res, c, q) for (a, k, res, c), q in sums.items()]
    return sorted(totals, key=usage_total_order)


def usage_total_order(t: UsageTotal) -> tuple[str, str, str, str]:
    """An invoice's line order: by account, kind, resource, then class (none as "None")."""
    return (t.account_id, t.kind, t.resource, str(t.capacity_class))


@dataclass(frozen=True, slots=True)
class IntervalUsage:
    """The fleet's billed quantity of one kind, resource and class in one interval, summed over
    its subjects and accounts: what the operator's series spreads over its buckets (a share of
    a quantity, and its price, are linear in it, so spreading the sum is spreading each record).
    A store sums them where the records are (`Store.usage_by_interval`)."""

    kind: UsageKind
    resource: str
    capacity_class: CapacityClass | None
    interval_start: Timestamp
    interval_end: Timestamp
    quantity_s: int


def usage_by_interval(records: Iterable[UsageRecord]) -> list[IntervalUsage]:
    """The records summed per (interval, kind, resource, class), in that order."""
    sums: dict[tuple[Timestamp, Timestamp, UsageKind, str, CapacityClass | None], int] = (
        defaultdict(int)
    )
    for r in records:
        sums[(r.interval_start, r.interval_end, r.kind, r.resource, r.capacity_class)] += (
            r.quantity_s
        )
    found = [IntervalUsage(k, res, c, a, b, q) for (a, b, k, res, c), q in sums.items()]
    return sorted(found, key=interval_usage_order)


def interval_usage_order(u: IntervalUsage) -> tuple[Timestamp, Timestamp, str, str, str]:
    return (u.interval_start, u.interval_end, u.kind, u.resource, str(u.capacity_class))


def check_interval(interval_s: int) -> int:
    if not MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S:
        raise InvalidRequest(
            f"metering_interval_s must be between {MIN_INTERVAL_S} and {MAX_INTERVAL_S} seconds, "
            f"got {interval_s}",
            hint=f"leave it at the default {DEFAULT_INTERVAL_S} unless you have a reason",
        )
    return interval_s


def closed_until(now: Timestamp, interval_s: int) -> Timestamp:
    """The end of the last interval that is closed at `now`."""
    return now - now % interval_s


def meter(
    spans: Iterable[UsageSpan],
    metered_through: Mapping[MeterKey, Timestamp],
    now: Timestamp,
    interval_s: int = DEFAULT_INTERVAL_S,
) -> list[UsageRecord]:
    """Records for every closed interval not yet metered, sorted by key."""
    check_interval(interval_s)
    groups: dict[MeterKey, list[UsageSpan]] = defaultdict(list)
    for span in spans:
        groups[span.meter_key].append(span)
    records: list[UsageRecord] = []
    for key, group in sorted(groups.items()):
        since = metered_through.get(key)
        records += _meter_subject(group, since, closed_until(now, interval_s), interval_s)
    return records


def metered_through_after(
    previous: Mapping[MeterKey, Timestamp], records: Iterable[UsageRecord]
) -> dict[MeterKey, Timestamp]:
    """Advance `metered_through` past the records just written."""
    result = dict(previous)
    for r in records:
        key: MeterKey = (r.subject_id, r.kind)
        result[key] = max(result.get(key, r.interval_end), r.interval_end)
    return result


def _meter_subject(
    group: list[UsageSpan], since: Timestamp | None, until: Timestamp, interval_s: int
) -> list[UsageRecord]:
    first = _check_group(group)
    seconds: dict[Timestamp, int] = defaultdict(int)
    quantity_s: dict[Timestamp, int] = defaultdict(int)
    quantity: dict[Timestamp, int] = defaultdict(int)
    for span in group:
        lo = span.start if since is None else max(span.start, since)
        hi = until if span.end is None else min(span.end, until)
        t = lo
        while t < hi:
            aligned = t - t % interval_s
            window = aligned if since is None else max(aligned, since)
            upto = min(aligned + interval_s, hi)
            seconds[window] += upto - t
            quantity_s[window] += (upto - t) * span.quantity
            quantity[window] = max(quantity[window], span.quantity)
            t = upto
    return [
        UsageRecord(
            subject_id=first.subject_id,
            account_id=first.account_id,
            kind=first.kind,
            resource=first.resource,
            capacity_class=first.capacity_class,
            interval_start=window,
            interval_end=window - window % interval_s + interval_s,
            seconds=seconds[window],
            quantity=quantity[window],
            quantity_s=quantity_s[window],
        )
        for window in sorted(seconds)
    ]


def _check_group(group: list[UsageSpan]) -> UsageSpan:
    """One subject's spans must agree on who pays for what, and must not overlap. Spans that
    start together are ordered by their end, so that an empty one (a gang's hold of its
    surviving hosts that ended the second it began, when the gang was placed again at once)
    comes first and touches the next without overlapping it."""
    ordered = sorted(group, key=_start_then_end)
    first = ordered[0]
    for prev, span in pairwise(ordered):
        same = (span.account_id, span.resource, span.capacity_class)
        if same != (first.account_id, first.resource, first.capacity_class):
            raise InvalidRequest(
                f"usage of {first.subject_id} ({first.kind}) mixes accounts, resources or classes",
                hint="give each billed thing its own subject id",
            )
        if prev.end is None or prev.end > span.start:
            raise InvalidRequest(
                f"usage of {first.subject_id} ({first.kind}) overlaps itself at {span.start}",
                hint="a subject runs at most once at a time; close the previous span first",
            )
    return first


def _start_then_end(span: UsageSpan) -> tuple[Timestamp, bool, Timestamp]:
    return (span.start, span.end is None, 0 if span.end is None else span.end)


# --- Spans from lifecycle states ---------------------------------------------------------------


def instance_gpu_spans(state: InstanceState) -> list[UsageSpan]:
    """One span per run: from the workload's start to its notice (T+0), or its exit; a gang's
    covers the GPUs of all its hosts. And one per hold of a gang's surviving hosts (idle GPUs
    kept for it: billed at its rate), from the drain's end to the hold's."""
    return [
        UsageSpan(
            subject_id=state.id,
            account_id=state.account_id,
            kind="gpu",
            resource=state.pool.gpu_type,
            quantity=state.total_gpus if run.gpus is None else run.gpus,
            capacity_class=state.capacity_class,
            start=run.started_at,
            end=run.billed_until,
        )
        for run in (*state.runs, *state.held_runs)
    ]


def node_gpu_span(node: NodeState) -> UsageSpan | None:
    """A node is billed from ready to its notice (cordon); None if it never became ready."""
    if node.started_at is None:
        return None
    return UsageSpan(
        subject_id=node.id,
        account_id=node.account_id,
        kind="gpu",
        resource=node.pool.gpu_type,
        quantity=node.gpus,
        capacity_class=node.capacity_class,
        start=node.started_at,
        end=node.billed_until,
    )


def volume_span(
    volume_id: str,
    account_id: str,
    size_gb: int,
    created_at: Timestamp,
    deleted_at: Timestamp | None = None,
) -> UsageSpan:
    """Storage accrues while the volume exists, whatever its instance does (queued, interrupted)."""
    return UsageSpan(
        volume_id, account_id, "storage", volume_id, size_gb, None, created_at, deleted_at
    )
