"""An immutable FIFO of tickets, cheap to update when it is long.

A pool's queue can hold 100,000 tickets. Copying a flat tuple of that size on every enqueue and
every placement costs milliseconds; this queue is a tuple of sorted chunks, so an update copies one
chunk and the short tuple of chunks, and every version shares the untouched chunks.

Each chunk's GPU total is kept beside it, so a ticket's place and the GPUs asked ahead of it
(`place`) cost O(chunks + CHUNK), not a walk of the queue: the API answers queue positions and
ETAs from this, and a chunk's total is summed only when the chunk is copied anyway.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from lowcostgpu.core.state import Ticket
from lowcostgpu.domain.capacity import Timestamp

CHUNK = 256
Key = tuple[Timestamp, str]


def _key(ticket: Ticket) -> Key:
    return ticket.order_key()


@dataclass(frozen=True, slots=True)
class TicketQueue:
    """Tickets in FIFO order (original enqueue time, then id)."""

    chunks: tuple[tuple[Ticket, ...], ...] = ()
    # The last key of each chunk, to find a key's chunk by bisection.
    last_keys: tuple[Key, ...] = ()
    # The GPUs the tickets of each chunk ask for, to count the GPUs ahead of a ticket by chunk.
    chunk_gpus: tuple[int, ...] = ()

    @classmethod
    def of(cls, tickets: Iterable[Ticket]) -> TicketQueue:
        ordered = sorted(tickets, key=_key)
        chunks = tuple(tuple(ordered[i : i + CHUNK]) for i in range(0, len(ordered), CHUNK))
        return cls(chunks, tuple(_key(c[-1]) for c in chunks), tuple(map(_gpus, chunks)))

    def __iter__(self) -> Iterator[Ticket]:
        for chunk in self.chunks:
            yield from chunk

    def __len__(self) -> int:
        return sum(len(c) for c in self.chunks)

    def __bool__(self) -> bool:
        return bool(self.chunks)

    def find(self, key: Key) -> Ticket | None:
        """The ticket with exactly this key, if queued."""
        at = bisect_left(self.last_keys, key)
        if at == len(self.chunks):
            return None
        chunk = self.chunks[at]
        i = bisect_left(chunk, key, key=_key)
        return chunk[i] if i < len(chunk) and _key(chunk[i]) == key else None

    @property
    def gpus(self) -> int:
        """The GPUs every queued ticket asks for, in all: O(chunks)."""
        return sum(self.chunk_gpus)

    def place(self, key: Key) -> Place | None:
        """Where the ticket with exactly this key stands, or None if it is not queued.

        Bisection finds its chunk and its index there; the tickets and GPUs of the chunks
        before it are summed chunk by chunk: O(chunks + CHUNK)."""
        at = bisect_left(self.last_keys, key)
        if at == len(self.chunks):
            return None
        chunk = self.chunks[at]
        i = bisect_left(chunk, key, key=_key)
        if i == len(chunk) or _key(chunk[i]) != key:
            return None
        index = sum(map(len, self.chunks[:at])) + i
        ahead = sum(self.chunk_gpus[:at]) + _gpus(chunk[:i])
        return Place(chunk[i], index, ahead)

    def inserted(self, ticket: Ticket) -> TicketQueue:
        key = _key(ticket)
        if not self.chunks:
            return TicketQueue(((ticket,),), (key,), (ticket.gpus,))
        at = min(bisect_left(self.last_keys, key), len(self.chunks) - 1)
        chunk = self.chunks[at]
        i = bisect_right(chunk, key, key=_key)
        new = chunk[:i] + (ticket,) + chunk[i:]  # noqa: RUF005 (a C-level copy)
        total = self.chunk_gpus[at] + ticket.gpus
        if len(new) <= CHUNK:
            return self._replaced(at, (new,), (total,))
        half = len(new) // 2  # a split, once per CHUNK / 2 inserts: only then a chunk is summed
        first = _gpus(new[:half])
        return self._replaced(at, (new[:half], new[half:]), (first, total - first))

    def removed(self, keys: Iterable[Key]) -> TicketQueue:
        """Without the tickets of these keys (keys not queued are ignored)."""
        by_chunk: dict[int, set[Key]] = {}
        for key in keys:
            at = bisect_left(self.last_keys, key)
            if at < len(self.chunks):
                by_chunk.setdefault(at, set()).add(key)
        result = self
        for at in sorted(by_chunk, reverse=True):  # right to left: indices stay valid
            chunk = result.chunks[at]
            kept, gone_gpus = _without(chunk, by_chunk[at])
            if len(kept) != len(chunk):
                left = result.chunk_gpus[at] - gone_gpus
                result = result._replaced(at, (kept,), (left,)) if kept else result._replaced(at)
        return result

    def _replaced(
        self, at: int, pieces: tuple[tuple[Ticket, ...], ...] = (), gpus: tuple[int, ...] = ()
    ) -> TicketQueue:
        """Chunk `at` replaced by `pieces` (none: taken out), whose GPU totals are `gpus`."""
        chunks = self.chunks[:at] + pieces + self.chunks[at + 1 :]
        keys = self.last_keys[:at] + tuple(_key(p[-1]) for p in pieces) + self.last_keys[at + 1 :]
        totals = self.chunk_gpus[:at] + gpus + self.chunk_gpus[at + 1 :]
        return TicketQueue(chunks, keys, totals)


@dataclass(frozen=True, slots=True)
class Place:
    """A queued ticket's place: its 0-based index and the GPUs the tickets ahead of it ask."""

    ticket: Ticket
    index: int
    gpus_ahead: int


def _gpus(tickets: tuple[Ticket, ...]) -> int:
    return sum(t.gpus for t in tickets)


def _without(chunk: tuple[Ticket, ...], keys: set[Key]) -> tuple[tuple[Ticket, ...], int]:
    """The chunk less the tickets of `keys`, cut out by bisection and slicing, and the GPUs
    those tickets asked for."""
    cuts = []
    for key in keys:
        i = bisect_left(chunk, key, key=_key)
        if i < len(chunk) and _key(chunk[i]) == key:
            cuts.append(i)
    kept: tuple[Ticket, ...] = ()
    start = 0
    for i in sorted(cuts):
        kept += chunk[start:i]
        start = i + 1
    return kept + chunk[start:], sum(chunk[i].gpus for i in cuts)
