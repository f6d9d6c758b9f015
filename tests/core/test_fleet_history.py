"""Queue depth and reclaims over time, pure: the window's buckets, the depth as a bucket closes
and its peak (with the boundary pairs at bucket edges), reclaims in their bucket, and the
replay of an instance's events into the stretches it waited."""

from __future__ import annotations

import pytest

from lowcostgpu.core import fleet_history as fh
from lowcostgpu.core.fleet_history import Mark, Reclaim, Stretch
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.events import Reason as R

T0 = 1_000_000 // 3600 * 3600  # an hour boundary
W = fh.Window(T0, T0 + 180, 60)  # three buckets of a minute
NOW = T0 + 150  # inside the last bucket
P, Q = "eu-west/a100-sxm4", "eu-west/h100-sxm"


# --- the window ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window_s", "step_s", "refused_because"),
    [
        (3600, 60, None),
        (3600, 59, "at least 60"),  # boundary pair: the smallest step
        (60, 60, None),
        (59, 60, "between step_s"),  # boundary pair: a window of one step at least
        (60_000, 60, None),
        (60_060, 60, "more than 1000"),  # boundary pair: 1000 points at most
        (90 * 86400, 86400, None),
        (90 * 86400 + 1, 86400, "90 days"),  # boundary pair: the longest window
    ],
)
def test_a_window_is_whole_steps_ending_with_the_one_that_holds_now(
    window_s: int, step_s: int, refused_because: str | None
) -> None:
    if refused_because is not None:
        with pytest.raises(InvalidRequest, match=refused_because) as refused:
            fh.Window.ending(T0 + 10, window_s, step_s)
        assert refused.value.hint  # says what to ask instead
        return
    window = fh.Window.ending(T0 + 10, window_s, step_s)
    assert window.start <= T0 + 10 < window.end == (T0 // step_s + 1) * step_s
    assert len(window.starts()) == window_s // step_s


def test_a_window_whose_length_is_not_whole_steps_is_cut_to_whole_steps() -> None:
    window = fh.Window.ending(T0, 150, 60)
    assert (window.end - window.start, len(window.starts())) == (120, 2)


@pytest.mark.parametrize(("count", "step_s", "rate"), [(3, 3600, 3), (1, 600, 6), (6, 21600, 1)])
def test_reclaims_per_hour_scale_a_step_to_an_hour(count: int, step_s: int, rate: float) -> None:
    assert fh.per_hour(count, step_s) == rate


# --- queue depth per bucket: (closing depth, peak) ---------------------------------------------


@pytest.mark.parametrize(
    ("stretches", "expected"),
    [
        ([], [(0, 0), (0, 0), (0, 0)]),
        # boundary pair: starting just before an edge counts in the bucket that closes there …
        ([(59, None)], [(1, 1), (1, 1), (1, 1)]),
        # … starting on the edge belongs to the next bucket only
        ([(60, None)], [(0, 0), (1, 1), (1, 1)]),
        # boundary pair: waiting up to an edge is waiting as that bucket closes, not after it …
        ([(10, 60)], [(1, 1), (0, 0), (0, 0)]),
        # … one second past the edge shows as the next bucket's peak, not its close
        ([(10, 61)], [(1, 1), (0, 1), (0, 0)]),
        ([(59, 61)], [(1, 1), (0, 1), (0, 0)]),
        # a peak inside a bucket that is gone by its close
        ([(10, 20), (15, 25)], [(0, 2), (0, 0), (0, 0)]),
        # waiting since before the window, and gone before it
        ([(-100, None), (-100, -50)], [(1, 1), (1, 1), (1, 1)]),
        # no time waiting at all (queued and placed in the same second)
        ([(30, 30)], [(0, 0), (0, 0), (0, 0)]),
        # boundary pair at now: the last bucket closes just after now …
        ([(150, None)], [(0, 0), (0, 0), (1, 1)]),
        # … so what starts after now is not in it
        ([(151, None)], [(0, 0), (0, 0), (0, 0)]),
    ],
)
def test_the_depth_as_each_bucket_closes_and_its_peak(
    stretches: list[tuple[int, int | None]], expected: list[tuple[int, int]]
) -> None:
    waiting = [Stretch(P, T0 + a, None if b is None else T0 + b) for a, b in stretches]
    points = fh.history(W, NOW, waiting, [], [P])
    assert [(p.total.depth, p.total.peak) for p in points] == expected
    assert [(p.pools[P].depth, p.pools[P].peak) for p in points] == expected
    assert [p.start for p in points] == [T0, T0 + 60, T0 + 120]


def test_the_whole_fleet_peaks_when_its_pools_together_do_not_sum_their_peaks() -> None:
    waiting = [Stretch(P, T0 + 10, T0 + 20), Stretch(Q, T0 + 30, T0 + 40)]
    (first, *_) = fh.history(W, NOW, waiting, [], [P, Q])
    assert (first.pools[P].peak, first.pools[Q].peak, first.total.peak) == (1, 1, 1)


# --- reclaims per bucket -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("at", "bucket"),
    [
        (-1, None),  # boundary pair: the second before the window …
        (0, 0),  # … and its first
        (59, 0),  # boundary pair at an edge
        (60, 1),
        (179, 2),  # boundary pair: the window's last second …
        (180, None),  # … and its end
    ],
)
def test_a_reclaim_counts_in_the_bucket_its_time_falls_in(at: int, bucket: int | None) -> None:
    points = fh.history(W, NOW, [], [Reclaim(P, T0 + at)], [P])
    counts = [p.total.reclaims for p in points]
    assert counts == [1 if i == bucket else 0 for i in range(3)]
    assert [p.pools[P].reclaims for p in points] == counts


def test_reclaims_are_counted_per_pool_and_in_all_and_every_pool_has_a_point() -> None:
    reclaims = [Reclaim(P, T0 + 1), Reclaim(Q, T0 + 2), Reclaim(Q, T0 + 61)]
    points = fh.history(W, NOW, [], reclaims, [P, Q, "us-east/l4"])
    assert [p.total.reclaims for p in points] == [2, 1, 0]
    assert [p.pools[Q].reclaims for p in points] == [1, 1, 0]
    assert points[0].pools["us-east/l4"] == fh.Level()


# --- replaying an instance's events ----------------------------------------------------------


def _marks(*steps: tuple[int, R], object_id: str = "i-1") -> list[Mark]:
    return [Mark(object_id, T0 + at, reason) for at, reason in steps]


@pytest.mark.parametrize(
    ("steps", "waiting_now", "at_start"),
    [
        ([(10, R.QUEUED)], False, False),  # queued in the window: not before
        ([(10, R.REQUEUED)], True, False),
        ([(10, R.SCHEDULED)], False, True),  # placed in the window: it waited before
        ([(5, R.CHECKPOINT_REPORTED), (10, R.SCHEDULED)], False, True),  # a report says nothing
        ([(10, R.PREEMPTED), (20, R.STOPPED)], False, False),  # running, then stopped
        ([(10, R.STOPPED)], False, None),  # from the queue, or after a drain: unknown
        ([(10, R.DELETED)], False, None),
        ([], True, True),  # no event in the window: as it is now
        ([], False, False),
    ],
)
def test_the_state_at_the_window_start_from_its_first_telling_event(
    steps: list[tuple[int, R]], waiting_now: bool, at_start: bool | None
) -> None:
    known, unknown = fh.waiting_at_start(_marks(*steps), ["i-1"] if waiting_now else [])
    if at_start is None:
        assert (known, unknown) == ({}, {"i-1"})
    else:
        assert (known.get("i-1", False), unknown) == (at_start, set())


@pytest.mark.parametrize(
    ("steps", "last"),
    [
        ([(10, R.QUEUED), (20, R.SCHEDULED), (30, R.STARTED)], False),
        ([(10, R.INTERRUPTED), (10, R.REQUEUED)], True),
        ([(10, R.QUEUED), (20, R.CHECKPOINT_REPORTED)], True),
        ([(10, R.QUEUED), (20, R.STOPPED)], False),
    ],
)
def test_the_state_after_an_instances_last_telling_event(
    steps: list[tuple[int, R]], last: bool
) -> None:
    assert fh.last_known(_marks(*steps)) == {"i-1": last}


@pytest.mark.parametrize(
    ("at_start", "steps", "expected"),
    [
        (  # queued, placed, reclaimed, requeued, placed again
            False,
            [
                (10, R.QUEUED),
                (20, R.SCHEDULED),
                (25, R.STARTED),
                (30, R.PREEMPTED),
                (40, R.INTERRUPTED),
                (40, R.REQUEUED),
                (50, R.SCHEDULED),
            ],
            [(10, 20), (40, 50)],
        ),
        (True, [(15, R.STOPPED)], [(0, 15)]),  # waiting when the window opened
        (True, [], [(0, None)]),  # and still waiting
        (False, [(10, R.QUEUED), (10, R.SCHEDULED)], []),  # placed at once: never waited
        (False, [(10, R.QUEUED), (12, R.QUEUED)], [(10, None)]),  # a repeat changes nothing
    ],
)
def test_events_replay_into_the_stretches_an_instance_waited(
    at_start: bool, steps: list[tuple[int, R]], expected: list[tuple[int, int | None]]
) -> None:
    found = fh.stretches(_marks(*steps), {"i-1": at_start}, {"i-1": P}, T0)
    assert found == [Stretch(P, T0 + a, None if b is None else T0 + b) for a, b in expected]


def test_an_instance_without_a_pool_is_left_out() -> None:
    marks = _marks((10, R.QUEUED), object_id="i-gone")
    assert fh.stretches(marks, {"i-gone": True}, {"i-1": P}, T0) == []


@pytest.mark.parametrize(
    ("ready", "removed", "end"),
    [(30, None, 30), (None, 40, 40), (None, None, None), (30, 90, 30)],
)
def test_a_node_waits_from_its_creation_until_it_is_ready_or_removed(
    ready: int | None, removed: int | None, end: int | None
) -> None:
    assert fh.node_stretch(P, 10, ready, removed) == Stretch(P, 10, end)
