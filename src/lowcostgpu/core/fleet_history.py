"""The fleet over time for the operator: queue depth and reclaims per step of a window.

Pure (no I/O, no clock: `now` is a parameter). The history is derived from what the store keeps
durably — the event log and the node records — so it is the same after a restart; nothing is
sampled in memory.

Queue depth. An instance waits in its pool's queue from a `Queued` or `Requeued` event until the
event that takes it out: `Scheduled` (placed), `Stopped` or `Deleted` (the user). Each reason
says whether the instance was waiting just before it and just after it (`BEFORE_AFTER`); a
window's events replayed from the state at its start give each instance's waiting `Stretch`es.
The state at the start is known without reading older events for almost every instance: from its
first telling event in the window (a `Scheduled` one was waiting, a `Queued` one was not), or,
when it has none, from whether it waits now. Only `Stopped` and `Deleted` leave it open (the
instance may have been waiting or not); `waiting_at_start` names those, and the caller looks
further back for their last telling event (`last_known`). A preemptible cluster node waits from
its creation (its `Queued` event) until it is ready or removed: its record says both.

Buckets. A bucket [start, start + step_s) reports the depth as it closes (at the end, or at
`now` for the bucket that holds now), the peak depth inside it, and the reclaims (`Preempted`
events of instances and nodes) whose time falls inside it; per pool and in all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import InvalidRequest
from lowcostgpu.domain.events import Reason

MIN_STEP_S = 60
MAX_POINTS = 1000
MAX_WINDOW_S = 90 * 86400
ALL = "*"  # the key of the whole fleet among the pools

# reason → (waiting just before, waiting just after); None: the reason alone does not say.
BEFORE_AFTER: Mapping[Reason, tuple[bool | None, bool]] = {
    Reason.QUEUED: (False, True),
    Reason.REQUEUED: (False, True),
    Reason.SCHEDULED: (True, False),
    Reason.STOPPED: (None, False),  # from the queue, or after a stop's drain, or interrupted
    Reason.DELETED: (None, False),  # from the queue, or stopped, finished, interrupted
    Reason.STARTED: (False, False),
    Reason.RESTARTED: (False, False),
    Reason.PREEMPTED: (False, False),
    Reason.STOPPING: (False, False),
    Reason.KILLED: (False, False),
    Reason.INTERRUPTED: (False, False),
    Reason.SUCCEEDED: (False, False),
    Reason.FAILED: (False, False),
}


@dataclass(frozen=True, slots=True)
class Mark:
    """One event of an instance as the history reads it (the rest of the record is not needed)."""

    object_id: str
    at: Timestamp
    reason: Reason


@dataclass(frozen=True, slots=True)
class Stretch:
    """A time something waited in `pool`'s queue: [start, end); `end` None: it still waits."""

    pool: str
    start: Timestamp
    end: Timestamp | None = None


@dataclass(frozen=True, slots=True)
class Reclaim:
    pool: str
    at: Timestamp


@dataclass(frozen=True, slots=True)
class Level:
    """One bucket of one pool (or of all): depth as it closes, peak depth, reclaims."""

    depth: int = 0
    peak: int = 0
    reclaims: int = 0


@dataclass(frozen=True, slots=True)
class Point:
    start: Timestamp
    total: Level
    pools: Mapping[str, Level]


@dataclass(frozen=True, slots=True)
class Window:
    """`points` buckets of `step_s` seconds ending with the one that holds now."""

    start: Timestamp
    end: Timestamp
    step_s: int

    @classmethod
    def ending(cls, now: Timestamp, window_s: int, step_s: int) -> Window:
        """The whole steps of the `window_s` before now, aligned to `step_s`; `InvalidRequest`
        saying what to change when the request makes no plot."""
        if step_s < MIN_STEP_S:
            raise InvalidRequest(
                f"step_s is {step_s}: a step is at least {MIN_STEP_S} s",
                hint="e.g. window_s=86400&step_s=3600 (24 h, one point per hour)",
            )
        if not step_s <= window_s <= MAX_WINDOW_S:
            raise InvalidRequest(
                f"window_s is {window_s}: it must be between step_s ({step_s}) and "
                f"{MAX_WINDOW_S} (90 days)",
                hint="e.g. window_s=21600&step_s=600 (6 h), window_s=604800&step_s=3600 (7 d)",
            )
        points = window_s // step_s
        if points > MAX_POINTS:
            raise InvalidRequest(
                f"window_s / step_s is {points} points, more than {MAX_POINTS}",
                hint=f"take step_s of at least {-(-window_s // MAX_POINTS)} or a shorter window",
            )
        end = (now // step_s + 1) * step_s
        return cls(end - points * step_s, end, step_s)

    def starts(self) -> range:
        return range(self.start, self.end, self.step_s)


def per_hour(count: int, step_s: int) -> float:
    """A count per step as a rate per hour (the same number when the step is an hour)."""
    return count * 3600 / step_s


# --- the state at the window's start -----------------------------------------------------------


def waiting_at_start(
    marks: Iterable[Mark], waiting_now: Iterable[str]
) -> tuple[dict[str, bool], set[str]]:
    """Whether each instance that matters waited when the window opened: those the window's
    `marks` (in seq order) tell about, and those waiting now. Returns what is known and the
    instances whose first telling event in the window is `Stopped` or `Deleted` (unknown)."""
    known: dict[str, bool] = {}
    unknown: set[str] = set()
    for m in marks:
        if m.reason not in BEFORE_AFTER or m.object_id in known or m.object_id in unknown:
            continue
        before = BEFORE_AFTER[m.reason][0]
        if before is None:
            unknown.add(m.object_id)
        else:
            known[m.object_id] = before
    for object_id in waiting_now:
        if object_id not in known and object_id not in unknown:
            known[object_id] = True  # nothing changed it in the window: it waited all along
    return known, unknown


def last_known(marks: Iterable[Mark]) -> dict[str, bool]:
    """Whether each instance waited after its last telling event among `marks` (seq order)."""
    return {m.object_id: BEFORE_AFTER[m.reason][1] for m in marks if m.reason in BEFORE_AFTER}


def stretches(
    marks: Iterable[Mark], at_start: Mapping[str, bool], pool_of: Mapping[str, str], since: int
) -> list[Stretch]:
    """The waiting stretches of the instances in `pool_of`, replaying `marks` (seq order, all at
    or after `since`) from their state at `since`; a stretch open at `since` starts there."""
    open_at = {i: since for i, waits in at_start.items() if waits and i in pool_of}
    found: list[Stretch] = []
    for m in marks:
        if m.reason not in BEFORE_AFTER or m.object_id not in pool_of:
            continue
        after = BEFORE_AFTER[m.reason][1]
        if after and m.object_id not in open_at:
            open_at[m.object_id] = m.at
        elif not after and m.object_id in open_at:
            found.append(Stretch(pool_of[m.object_id], open_at.pop(m.object_id), m.at))
    found += [Stretch(pool_of[i], start, None) for i, start in open_at.items()]
    return [s for s in found if s.end is None or s.end > s.start]


def node_stretch(
    pool: str, created_at: Timestamp, ready_at: Timestamp | None, removed_at: Timestamp | None
) -> Stretch:
    """A preemptible node waits from its creation until it is ready (or removed before that)."""
    return Stretch(pool, created_at, ready_at if ready_at is not None else removed_at)


# --- buckets -------------------------------------------------------------------------------------


def history(
    window: Window,
    now: Timestamp,
    waiting: Sequence[Stretch],
    reclaims: Sequence[Reclaim],
    pools: Iterable[str] = (),
) -> list[Point]:
    """One point per step of `window`: queue depth (closing and peak) and reclaims, per pool
    (every pool of `pools` and any the data names) and in all."""
    names = sorted({*pools, *(s.pool for s in waiting), *(r.pool for r in reclaims)})
    levels = {name: _levels([s for s in waiting if s.pool == name], window, now) for name in names}
    levels[ALL] = _levels(waiting, window, now)
    counts = {name: _counts([r for r in reclaims if r.pool == name], window) for name in names}
    counts[ALL] = _counts(reclaims, window)
    return [
        Point(
            start=start,
            total=Level(*levels[ALL][i], counts[ALL][i]),
            pools={name: Level(*levels[name][i], counts[name][i]) for name in names},
        )
        for i, start in enumerate(window.starts())
    ]


def _levels(waiting: Sequence[Stretch], window: Window, now: Timestamp) -> list[tuple[int, int]]:
    """(closing depth, peak depth) per bucket. The depth at an instant t counts the stretches
    with start <= t < end; a bucket closes at its end, or just after `now` if that is sooner."""
    delta: Counter[Timestamp] = Counter()
    for s in waiting:
        delta[s.start] += 1
        if s.end is not None:
            delta[s.end] -= 1
    times = sorted(delta)
    i, level = 0, 0
    out: list[tuple[int, int]] = []
    for start in window.starts():
        close = min(start + window.step_s, now + 1)
        while i < len(times) and times[i] <= start:  # the depth at the bucket's first instant
            level += delta[times[i]]
            i += 1
        peak = level
        while i < len(times) and times[i] < close:
            level += delta[times[i]]
            peak = max(peak, level)
            i += 1
        out.append((level, peak) if start <= now else (0, 0))
    return out


def _counts(reclaims: Sequence[Reclaim], window: Window) -> list[int]:
    counts = [0] * ((window.end - window.start) // window.step_s)
    for r in reclaims:
        if window.start <= r.at < window.end:
            counts[(r.at - window.start) // window.step_s] += 1
    return counts
