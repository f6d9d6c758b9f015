"""An immutable sorted sequence, cheap to update when it is long (the fleet's host indexes).

A pool can have thousands of hosts. Its index of the hosts with free GPUs, or of the hosts by
newest progress mark, changes on nearly every decision; copying a flat tuple of that size per
change is O(hosts). This sequence is a tuple of sorted chunks (as `core.fifo` keeps a queue), so an
update copies one chunk and the short tuple of chunk ends, and every version shares the others.
Equality is by the items, not by how they happen to be chunked.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

CHUNK = 128
T = TypeVar("T", bound=tuple[Any, ...])


@dataclass(frozen=True, slots=True, eq=False)
class SortedChunks(Generic[T]):
    """Distinct items in ascending order."""

    chunks: tuple[tuple[T, ...], ...] = ()
    last: tuple[T, ...] = ()  # the last item of each chunk, to find an item's chunk by bisection

    @classmethod
    def of(cls, items: Iterable[T]) -> SortedChunks[T]:
        ordered = sorted(items)
        chunks = tuple(tuple(ordered[i : i + CHUNK]) for i in range(0, len(ordered), CHUNK))
        return cls(chunks, tuple(c[-1] for c in chunks))

    def __iter__(self) -> Iterator[T]:
        for chunk in self.chunks:
            yield from chunk

    def __reversed__(self) -> Iterator[T]:
        for chunk in reversed(self.chunks):
            yield from reversed(chunk)

    def __len__(self) -> int:
        return sum(map(len, self.chunks))

    def __bool__(self) -> bool:
        return bool(self.chunks)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SortedChunks):
            return NotImplemented
        return self.chunks == other.chunks or list(self) == list(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"SortedChunks({list(self)!r})"

    def from_item(self, item: T) -> Iterator[T]:
        """The items from the first one ≥ `item` on, ascending."""
        at = bisect_left(self.last, item)
        if at == len(self.chunks):
            return
        chunk = self.chunks[at]
        yield from chunk[bisect_left(chunk, item) :]
        for later in self.chunks[at + 1 :]:
            yield from later

    def inserted(self, item: T) -> SortedChunks[T]:
        if not self.chunks:
            return SortedChunks(((item,),), (item,))
        at = min(bisect_left(self.last, item), len(self.chunks) - 1)
        chunk = self.chunks[at]
        i = bisect_left(chunk, item)
        if i < len(chunk) and chunk[i] == item:
            return self
        new = chunk[:i] + (item,) + chunk[i:]  # noqa: RUF005 (a C-level copy)
        if len(new) <= CHUNK:
            return self._replaced(at, (new,))
        half = len(new) // 2
        return self._replaced(at, (new[:half], new[half:]))

    def removed(self, item: T) -> SortedChunks[T]:
        """Without `item` (unchanged if it is not there)."""
        at = bisect_left(self.last, item)
        if at == len(self.chunks):
            return self
        chunk = self.chunks[at]
        i = bisect_left(chunk, item)
        if i == len(chunk) or chunk[i] != item:
            return self
        kept = chunk[:i] + chunk[i + 1 :]
        return self._replaced(at, (kept,) if kept else ())

    def _replaced(self, at: int, pieces: tuple[tuple[T, ...], ...]) -> SortedChunks[T]:
        chunks = self.chunks[:at] + pieces + self.chunks[at + 1 :]
        ends = (pieces[0][-1],) if len(pieces) == 1 else tuple(p[-1] for p in pieces)
        last = self.last[:at] + ends + self.last[at + 1 :]
        return SortedChunks(chunks, last)
