"""The operator's fleet series: usage spread over the buckets it overlaps, revenue as rated,
reclaims counted where they happened, and windows refused when they make no sense."""

from __future__ import annotations

from fractions import Fraction

import pytest
from plane_world import POOL, World

from lowcostgpu.app import operator_stats as stats
from lowcostgpu.core.metering import UsageRecord
from lowcostgpu.core.rating import exact_amount
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.ports.store import EventRecord
from lowcostgpu.ports.store_records import Commit

T0 = 1_000_000 // 3600 * 3600  # an hour boundary before the world's clock


def _gpu(subject: str, start: int, end: int, gpus: int, cls: CapacityClass) -> UsageRecord:
    return UsageRecord(
        subject, "acct-1", "gpu", POOL.gpu_type, cls, start, end, end - start, gpus,
        (end - start) * gpus,
    )  # fmt: skip


def _event(key: str, at: int, reason: Reason) -> EventRecord:
    return EventRecord(key, at, "acct-1", "instance", "i-1", EventType.WARNING, reason, "m")


@pytest.mark.parametrize(
    ("window_s", "bucket_s", "ok"),
    [
        (3600, 60, True),
        (3600, 59, False),  # below the smallest bucket
        (60, 120, False),  # a bucket longer than the window
        (60_000, 60, True),  # exactly 1000 buckets
        (60_060, 60, False),  # 1001 buckets
    ],
)
def test_a_window_is_refused_when_its_buckets_make_no_sense(
    window_s: int, bucket_s: int, ok: bool
) -> None:
    if ok:
        window = stats.Window.ending(T0 + 10, window_s, bucket_s)
        assert window.end == T0 + bucket_s and (window.end - window.start) % bucket_s == 0
        assert len(window.buckets()) == window_s // bucket_s
    else:
        with pytest.raises(InvalidRequest):
            stats.Window.ending(T0 + 10, window_s, bucket_s)


def test_usage_is_split_over_the_buckets_it_overlaps_and_revenue_is_the_rated_amount() -> None:
    world = World()
    records = [
        _gpu("i-1", T0 + 30, T0 + 90, 2, CapacityClass.INTERRUPTIBLE),  # 30 s in each minute
        _gpu("i-2", T0 + 60, T0 + 120, 1, CapacityClass.ON_DEMAND),
    ]
    world.store.commit(Commit(usage=records))
    window = stats.Window(T0, T0 + 180, 60)
    buckets = stats.series(world.plane, window)
    assert [b.interruptible_gpu_s for b in buckets] == [60, 60, 0]
    assert [b.on_demand_gpu_s for b in buckets] == [0, 60, 0]
    rated = sum((exact_amount(r, world.plane.catalog) for r in records), Fraction(0))
    assert (
        sum((b.revenue for b in buckets), Fraction(0)) == rated == stats.revenue_total(world.plane)
    )
    assert buckets[2].revenue == 0


def test_reclaims_are_the_preempted_events_of_the_window_in_their_bucket() -> None:
    world = World()
    events = [
        _event("a", T0 + 5, Reason.PREEMPTED),
        _event("b", T0 + 65, Reason.PREEMPTED),
        _event("c", T0 + 70, Reason.PREEMPTED),
        _event("d", T0 + 70, Reason.INTERRUPTED),  # not a reclaim
        _event("e", T0 + 180, Reason.PREEMPTED),  # after the window
    ]
    world.store.commit(Commit(events=events))
    buckets = stats.series(world.plane, stats.Window(T0, T0 + 180, 60))
    assert [b.reclaims for b in buckets] == [1, 2, 0]


@pytest.mark.parametrize(
    ("amount", "shown"),
    [(Fraction(1, 3), "0.3333"), (Fraction(5, 100000), "0.0000"), (Fraction(15, 100000), "0.0002")],
)
def test_amounts_are_shown_rounded_half_even_to_a_hundredth_of_a_cent(
    amount: Fraction, shown: str
) -> None:
    assert stats.shown(amount) == shown
