"""Metering: closed intervals only, idempotent keys, every second billed exactly once."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_lifecycle_support import T0, at_status

from lowcostgpu.core.drain import Placed, Reclaimed
from lowcostgpu.core.lifecycle import WorkloadExited, WorkloadStarted, step
from lowcostgpu.core.metering import (
    MeterKey,
    UsageRecord,
    UsageSpan,
    closed_until,
    instance_gpu_spans,
    meter,
    metered_through_after,
    node_gpu_span,
    volume_span,
)
from lowcostgpu.core.node_lifecycle import node_step
from lowcostgpu.core.nodes import NodeState
from lowcostgpu.domain.capacity import CapacityClass, PoolKey
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.status import InstanceStatus

BASE = 1_700_000_040  # a multiple of 60 and of 120


def gpu_span(start: int, end: int | None, subject: str = "inst-1", gpus: int = 2) -> UsageSpan:
    return UsageSpan(
        subject, "acct-1", "gpu", "a100-sxm4", gpus, CapacityClass.INTERRUPTIBLE, start, end
    )


class Store:
    """The store's contract: insert a record, or ignore it if its key exists (upsert-ignore)."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str, int], UsageRecord] = {}
        self.metered_through: dict[MeterKey, int] = {}

    def tick(
        self, spans: Sequence[UsageSpan], now: int, interval_s: int, use_through: bool = True
    ) -> list[UsageRecord]:
        through = self.metered_through if use_through else {}
        out = meter(spans, through, now, interval_s)
        for r in out:
            existing = self.records.setdefault(r.key, r)
            assert existing == r, f"key {r.key} carried two different contents"
        self.metered_through = metered_through_after(self.metered_through, out)
        return out

    def seconds(self) -> int:
        return sum(r.seconds for r in self.records.values())

    def quantity_s(self) -> int:
        return sum(r.quantity_s for r in self.records.values())


@pytest.mark.parametrize("interval_s", [60, 90, 120])
def test_a_node_that_ran_12_minutes_is_billed_12_minutes(interval_s: int) -> None:
    store = Store()
    span = gpu_span(BASE + 17, BASE + 17 + 720, "node-1", gpus=8)
    for now in range(BASE, BASE + 2000, 61):
        store.tick([span], now, interval_s)
    assert store.seconds() == 720
    assert store.quantity_s() == 720 * 8


@pytest.mark.parametrize(("now_offset", "billed"), [(59, 0), (60, 30), (119, 30), (120, 90)])
def test_only_closed_intervals_are_billed(now_offset: int, billed: int) -> None:
    span = gpu_span(BASE + 30, None)
    records = meter([span], {}, BASE + now_offset, 60)
    assert sum(r.seconds for r in records) == billed
    assert all(r.interval_end <= BASE + now_offset for r in records)


def test_a_span_ending_mid_interval_is_billed_when_the_interval_closes() -> None:
    span = gpu_span(BASE, BASE + 20)
    assert meter([span], {}, BASE + 59, 60) == []
    (record,) = meter([span], {}, BASE + 60, 60)
    assert (record.interval_start, record.seconds, record.quantity_s) == (BASE, 20, 40)


def test_two_runs_in_one_interval_share_one_record() -> None:
    runs = [gpu_span(BASE, BASE + 20), gpu_span(BASE + 50, BASE + 70)]
    records = meter(runs, {}, BASE + 120, 60)
    assert [(r.interval_start, r.seconds) for r in records] == [(BASE, 30), (BASE + 60, 10)]


def test_repeating_a_tick_emits_the_same_records() -> None:
    spans = [gpu_span(BASE + 5, BASE + 500)]
    assert meter(spans, {}, BASE + 600, 60) == meter(spans, {}, BASE + 600, 60)


def test_metered_through_skips_what_is_already_stored() -> None:
    spans = [gpu_span(BASE, None)]
    records = meter(spans, {("inst-1", "gpu"): BASE + 120}, BASE + 180, 60)
    assert [r.interval_start for r in records] == [BASE + 120]


def test_changing_the_interval_never_bills_twice_nor_skips() -> None:
    store = Store()
    spans = [gpu_span(BASE, BASE + 1000)]
    store.tick(spans, BASE + 60, 60)  # metered through BASE+60
    store.tick(spans, BASE + 300, 120)  # next window starts mid-interval, at BASE+60
    store.tick(spans, BASE + 2000, 90)
    assert store.seconds() == 1000


@pytest.mark.parametrize(("interval_s", "ok"), [(59, False), (60, True), (120, True), (121, False)])
def test_metering_interval_is_60_to_120_seconds(interval_s: int, ok: bool) -> None:
    if ok:
        meter([], {}, BASE, interval_s)
    else:
        with pytest.raises(InvalidRequest, match="between 60 and 120"):
            meter([], {}, BASE, interval_s)


@pytest.mark.parametrize(
    ("spans", "billed_gpu_s"),
    [
        ([(0, 100), (50, None)], None),  # the second starts inside the first
        ([(0, 60), (60, 120)], 240),  # one ends as the next starts: touching, not overlapping
        ([(0, 61), (60, 120)], None),  # one second of overlap
        # An empty span (a gang's hold that ended the second it began, at its restart) that
        # starts with the next run, listed after it as an instance lists its runs and holds:
        ([(60, 120), (60, 60)], 120),
        ([(60, 120), (60, 90)], None),  # two that start together, neither empty
    ],
    ids=["inside", "touching", "one-second", "empty-beside-a-run", "same-start"],
)
def test_overlapping_runs_of_one_subject_are_refused_and_touching_ones_billed(
    spans: list[tuple[int, int | None]], billed_gpu_s: int | None
) -> None:
    given = [gpu_span(BASE + a, None if b is None else BASE + b) for a, b in spans]
    if billed_gpu_s is None:
        with pytest.raises(InvalidRequest, match="overlaps itself"):
            meter(given, {}, BASE + 600, 60)
    else:
        assert sum(r.quantity_s for r in meter(given, {}, BASE + 600, 60)) == billed_gpu_s


def test_a_span_cannot_end_before_it_starts() -> None:
    with pytest.raises(InvalidRequest, match="before its start"):
        gpu_span(BASE, BASE - 1)


def test_gpu_usage_of_an_interrupted_instance_ends_at_the_notice_storage_goes_on() -> None:
    s = at_status(InstanceStatus.RUNNING)  # started at T0 + 20
    s = step(s, Reclaimed("od-1"), T0 + 620).state
    s = step(s, WorkloadExited(143), T0 + 900).state  # 280 s of grace are not billed
    assert s.status is InstanceStatus.QUEUED
    (span,) = instance_gpu_spans(s)
    assert (span.start, span.end, span.quantity) == (T0 + 20, T0 + 620, 2)
    volume = volume_span("ckpts", "acct-1", 50, T0)
    now = T0 + 5000
    store = Store()
    store.tick([span, volume], now, 60)
    gpu = [r for r in store.records.values() if r.kind == "gpu"]
    storage = [r for r in store.records.values() if r.kind == "storage"]
    assert sum(r.seconds for r in gpu) == 600
    assert sum(r.seconds for r in storage) == closed_until(now, 60) - T0  # still accruing


def test_each_run_of_an_instance_is_its_own_span() -> None:
    s = at_status(InstanceStatus.RUNNING)
    s = step(s, Reclaimed("od-1"), T0 + 100).state
    s = step(s, WorkloadExited(143), T0 + 110).state
    s = step(s, Placed("alloc-2", "host-a", (0, 1)), T0 + 200).state
    s = step(s, WorkloadStarted(), T0 + 230).state
    spans = instance_gpu_spans(s)
    assert [(x.start, x.end) for x in spans] == [(T0 + 20, T0 + 100), (T0 + 230, None)]


def test_a_node_is_billed_from_ready_to_its_cordon() -> None:
    pool = PoolKey("eu", "h100-sxm")
    node = NodeState("n1", "c1", "acct-1", pool, 8, CapacityClass.INTERRUPTIBLE)
    assert node_gpu_span(node) is None
    node = node_step(node, Placed("a", "h", range(8)), BASE).state
    node = node_step(node, Reclaimed("od"), BASE + 720).state
    span = node_gpu_span(node)
    assert span is not None and (span.start, span.end, span.quantity) == (BASE, BASE + 720, 8)


# --- properties ---------------------------------------------------------------------------------


@st.composite
def _runs(draw: st.DrawFn) -> list[tuple[int, int | None]]:
    """One to three non-overlapping runs, the last possibly still open."""
    t = BASE + draw(st.integers(0, 500))
    runs: list[tuple[int, int | None]] = []
    for _ in range(draw(st.integers(1, 3))):
        length = draw(st.integers(0, 4000))
        runs.append((t, t + length))
        t += length + draw(st.integers(0, 200))
    if draw(st.booleans()):
        runs[-1] = (runs[-1][0], None)
    return runs


def _ticks(draw_list: Iterable[int]) -> list[int]:
    return sorted(BASE + d for d in draw_list)


@settings(max_examples=300, deadline=None)
@given(
    runs=_runs(),
    tick_offsets=st.lists(st.integers(0, 20000), max_size=25),
    interval_s=st.integers(60, 120),
    use_through=st.booleans(),
    gpus=st.integers(1, 8),
)
def test_any_tick_sequence_bills_every_second_exactly_once(
    runs: list[tuple[int, int | None]],
    tick_offsets: list[int],
    interval_s: int,
    use_through: bool,
    gpus: int,
) -> None:
    spans = [gpu_span(a, b, gpus=gpus) for a, b in runs]
    store = Store()
    ticks = _ticks(tick_offsets)
    final = BASE + 30000
    for now in [*ticks, *ticks[:3], final]:  # out-of-order repeats too
        store.tick(spans, now, interval_s, use_through)
    limit = closed_until(final, interval_s)
    expected = sum(min(b if b is not None else limit, limit) - a for a, b in runs)
    assert store.seconds() == expected
    assert store.quantity_s() == expected * gpus
    for r in store.records.values():
        assert r.interval_start < r.interval_end <= final
        assert 0 < r.seconds <= interval_s
