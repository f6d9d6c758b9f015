"""The virtual clock: one heap of events keyed by (time, priority, sequence).

Time only moves forward, to the time of the next event. At equal times the priority decides (a
workload's report before a deadline tick, before new arrivals, before retries, before samples),
and at equal priority the sequence number, i.e. the order of scheduling: so a run is fully
determined by its inputs.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import Final, Generic, TypeVar

P = TypeVar("P")

REPORT: Final = 0  # a workload reports what it did (exit, checkpoint)
TICK: Final = 1  # a grace deadline falls due
ARRIVAL: Final = 2  # a job is submitted
RETRY: Final = 3  # refused on-demand requests try again
SAMPLE: Final = 4  # a measurement of the fleet for the plots


class EventHeap(Generic[P]):
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int, P]] = []
        self._sequence = 0
        self.now = 0
        self.popped = 0

    def push(self, at: int, priority: int, payload: P) -> None:
        if at < self.now:
            raise ValueError(f"cannot schedule at {at}, before now ({self.now})")
        self._sequence += 1
        heappush(self._heap, (at, priority, self._sequence, payload))

    def pop(self) -> tuple[int, int, P]:
        at, priority, _, payload = heappop(self._heap)
        self.now = at
        self.popped += 1
        return at, priority, payload

    def peek_time(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
