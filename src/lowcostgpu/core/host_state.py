"""One host's state as the scheduler reads it: its allocations and what follows from them.

A `HostState` is derived from a host's allocations once, when a decision changes them
(`HostState.of`), so that the questions the queue and the victim search ask of every host they
look at — free GPUs, reclaimable GPUs, the sums of the latest progress marks, the least candidate
id — are answered from fields, not by walking the allocations again. The fleet snapshot
(`core.snapshot`) keeps one per host in a persistent map.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from itertools import accumulate
from operator import attrgetter

from lowcostgpu.domain.capacity import Allocation, CapacityClass, Host, Timestamp

LAST_ID = "\U0010ffff"  # sorts after any allocation id
# The progress marks the host indexes give a GPU whose workload believably saves at a notice
# (`Allocation.notice_save_s`): its loss is its save time, not the time since a mark, so no
# bound may count any. A mark later than any `now` makes every bound that reads marks as times
# 0 for it (and puts its host first in the order by newest mark, where the cheap victims are
# looked at first, the quickest saves first); a policy that knows savers reads the save time
# back (`saver_save_s`) for a tight floor.
SAVER_MARK = 2**60
SAVER_SPAN = 2**30  # save times up to this many seconds fit in the mark


def saver_mark(save_s: int) -> Timestamp:
    return SAVER_MARK + SAVER_SPAN - min(save_s, SAVER_SPAN)


def saver_save_s(mark: Timestamp) -> int | None:
    """The save time a saver's mark holds, or None when the mark is a time."""
    return None if mark < SAVER_MARK else SAVER_MARK + SAVER_SPAN - mark


_INTERRUPTIBLE = CapacityClass.INTERRUPTIBLE  # `Allocation.preemptible`, without two properties
_BY_ID: Callable[[Allocation], str] = attrgetter("id")


class _AllGpus(dict[int, frozenset[int]]):
    """frozenset(range(n)) for each host size n, built once per size."""

    def __missing__(self, size: int) -> frozenset[int]:
        self[size] = indices = frozenset(range(size))
        return indices


_ALL_GPUS = _AllGpus()


class SearchMemo:
    """What `HostState.searches_at` keeps: the moment, and the searches made at it."""

    __slots__ = ("entries", "now")

    def __init__(self) -> None:
        self.now: Timestamp | None = None
        self.entries: dict[Hashable, object] = {}


@dataclass(frozen=True, slots=True)
class HostState:
    """A host with the allocations on it and what follows from them, computed once."""

    host: Host
    allocations: tuple[Allocation, ...]
    free_indices: frozenset[int]
    free: int  # GPUs new work may take now (none on a cordoned host)
    reclaimable_gpus: int  # GPUs held by preemptible, not yet draining allocations
    # Sums of the k latest progress marks over those GPUs (one mark per GPU, latest first):
    # `k × now − mark_prefix[k]` bounds from below the work lost by freeing any k of them.
    mark_prefix: tuple[int, ...]
    newest_start: Timestamp | None  # the latest start among them: who may still be protected
    # (progress mark, start) of each reclaimable GPU, latest mark first: a bound for the GPUs
    # that are past their minimum runtime without looking at the allocations again.
    gpu_marks: tuple[tuple[Timestamp, Timestamp], ...]
    # (id, start, progress mark, GPUs) of those allocations by id, and their least "last
    # interrupted at" (-1 for never): a victim set here sorts after any key these already lose
    # to, which lets the victim search skip hosts that tie on cost without looking at their
    # allocations.
    candidate_marks: tuple[tuple[str, Timestamp, Timestamp, int], ...] = ()
    # Sums of the k largest of those allocations' GPU counts: the fewest victims that can free
    # a deficit here, without looking at the allocations.
    size_prefix: tuple[int, ...] = (0,)
    min_candidate_interrupted_at: Timestamp = -1
    # The victim searches already made on this very host state (`victims.choose_victims`):
    # made when first asked for, not part of the value.
    _searches: SearchMemo | None = field(default=None, init=False, compare=False, repr=False)

    def searches_at(self, now: Timestamp) -> dict[Hashable, object]:
        """The victim searches made on this host state at `now` (earlier ones are dropped: a
        memo holds one moment, so it stays as small as one burst of requests)."""
        memo = self._searches
        if memo is None:
            memo = SearchMemo()
            object.__setattr__(self, "_searches", memo)
        if memo.now != now:
            memo.now, memo.entries = now, {}
        return memo.entries

    @property
    def newest_mark(self) -> Timestamp | None:
        """The latest progress mark among reclaimable GPUs: the cheapest GPU here to reclaim."""
        return self.mark_prefix[1] if self.reclaimable_gpus else None

    def least_candidate_id(
        self,
        started_by: Timestamp,
        stop_at: str,
        gpu_floor: Callable[[Timestamp, Timestamp, Timestamp], int] | None,
        now: Timestamp,
        cost_limit: int,
    ) -> str:
        """A floor on the least id among the allocations here that started by `started_by` and
        whose `gpu_floor` (per GPU, given mark, start and now) does not put them above
        `cost_limit`; if none, a string that sorts after any id. The walk stops at the first
        id from `stop_at` on: a floor that high is all the caller needs to know."""
        for alloc_id, start, mark, gpus in self.candidate_marks:
            if alloc_id >= stop_at:
                return alloc_id
            if start <= started_by and (
                gpu_floor is None or gpus * gpu_floor(mark, start, now) <= cost_limit
            ):
                return alloc_id
        return LAST_ID

    def fewest_victims(self, deficit: int) -> int:
        """The fewest reclaimable allocations that together free `deficit` GPUs (at least 1)."""
        return max(1, bisect_left(self.size_prefix, deficit))

    def mark_entry(self) -> tuple[int, str] | None:
        """This host's place in its pool's order of hosts by newest mark, latest first."""
        mark = self.newest_mark
        return None if mark is None or self.host.cordoned else (-mark, self.host.id)

    @classmethod
    def of(cls, host: Host, allocations: Iterable[Allocation] = ()) -> HostState:
        """Derive everything from the allocations in one pass over them: O(a · log a) for the
        host's a allocations, run for each host a decision changes."""
        allocs = tuple(sorted(allocations, key=_BY_ID))
        held: set[int] = set()
        gpu_marks: list[tuple[Timestamp, Timestamp]] = []
        candidate_marks: list[tuple[str, Timestamp, Timestamp, int]] = []
        sizes: list[int] = []
        newest_start: Timestamp | None = None
        least_interrupted: Timestamp | None = None
        for a in allocs:
            indices = a.gpu_indices
            held.update(indices)
            if a.capacity_class is not _INTERRUPTIBLE or a.draining:
                continue
            start, checkpoint, gpus = a.started_at, a.last_checkpoint_at, len(indices)
            # `a.progress_mark`, inline: the last checkpoint if after the start, else the start
            mark = checkpoint if checkpoint is not None and checkpoint > start else start
            if a.saves_on_notice and (save_s := a.notice_save_s) is not None:
                mark = saver_mark(save_s)  # it loses its save time, whatever its mark's age
            gpu_marks += [(mark, start)] * gpus
            candidate_marks.append((a.id, start, mark, gpus))
            sizes.append(gpus)
            if newest_start is None or start > newest_start:
                newest_start = start
            interrupted = -1 if a.last_interrupted_at is None else a.last_interrupted_at
            if least_interrupted is None or interrupted < least_interrupted:
                least_interrupted = interrupted
        gpu_marks.sort(reverse=True)
        sizes.sort(reverse=True)
        free_indices = _ALL_GPUS[host.gpu_count] - held if held else _ALL_GPUS[host.gpu_count]
        return cls(
            host,
            allocs,
            free_indices,
            0 if host.cordoned else len(free_indices),
            len(gpu_marks),
            (0, *accumulate(mark for mark, _ in gpu_marks)),
            newest_start,
            tuple(gpu_marks),
            tuple(candidate_marks),
            (0, *accumulate(sizes)),
            -1 if least_interrupted is None else least_interrupted,
        )

    def with_allocations(self, allocations: Iterable[Allocation]) -> HostState:
        return HostState.of(self.host, allocations)
