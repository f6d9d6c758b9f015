"""One ticket's place and ETA without walking the queue: `TicketQueue.place` and `queue_entry`
give exactly what the walk (`queue_status`) gives, across chunks, inserts and removals."""

from __future__ import annotations

from unittest.mock import patch

import pytest
from fleet_builders import POOL, alloc, host, ticket
from hypothesis import given, settings
from hypothesis import strategies as st

from lowcostgpu.core import fifo
from lowcostgpu.core.eta import GpusFreed, PoolGpus
from lowcostgpu.core.fifo import TicketQueue
from lowcostgpu.core.queue import QueueEntry, queue_entry, queue_status
from lowcostgpu.core.snapshot import FleetSnapshot, dequeue, enqueue
from lowcostgpu.core.state import Ticket

NOW = 100
HOUR = 3600


def _fleet(tickets: list[Ticket]) -> FleetSnapshot:
    """Four GPUs, three held: one free, so the first ETA is now."""
    return FleetSnapshot.build([host("h1", 4)], [alloc("x", "h1", {0, 1, 2})], tickets)


ENDS: tuple[GpusFreed, ...] = ((NOW + HOUR, 3),)  # the three held GPUs drain within the hour


def _entry(snap: FleetSnapshot, t: Ticket, ends: tuple[GpusFreed, ...] = ENDS) -> QueueEntry | None:
    return queue_entry(snap, POOL, t.order_key(), NOW, PoolGpus.of(snap, POOL, ends))


def _walk(snap: FleetSnapshot, subject: str, ends: tuple[GpusFreed, ...] = ENDS) -> QueueEntry:
    (found,) = [e for e in queue_status(snap, POOL, NOW, ends) if e.subject_id == subject]
    return found


A, B, C = ticket("i-a", 1, enqueued_at=1), ticket("i-b", 2, enqueued_at=2), ticket("i-c", 4, 3)
NODE = ticket("c1-n0", 3, enqueued_at=2)  # a cluster node's ticket shares the queue


@pytest.mark.parametrize(
    ("tickets", "asked", "expected"),
    [
        ([A, B, C], A, QueueEntry("i-a", 1, 0, NOW)),  # first: fits the free GPU now
        ([A, B, C], B, QueueEntry("i-b", 2, 1, NOW + HOUR)),  # when the held GPUs are back
        ([A, B, C], C, QueueEntry("i-c", 3, 3, None)),  # 7 GPUs wanted, 4 known: unknown
        ([A, NODE, C], C, QueueEntry("i-c", 3, 4, None)),  # a node's 3 GPUs ahead
        ([C], C, QueueEntry("i-c", 1, 0, NOW + HOUR)),  # alone
        ([], A, None),  # empty queue
        ([B, C], A, None),  # not queued
        ([A, B, C], ticket("i-b", 2, enqueued_at=9), None),  # same subject, other key: not it
    ],
    ids=["first", "second", "last", "node-ahead", "alone", "empty", "absent", "wrong-key"],
)
def test_a_tickets_entry_is_its_place_gpus_ahead_and_eta(
    tickets: list[Ticket], asked: Ticket, expected: QueueEntry | None
) -> None:
    snap = _fleet(tickets)
    assert _entry(snap, asked) == expected
    if expected is not None:
        assert _walk(snap, asked.subject_id) == expected


def test_after_a_removal_the_tickets_behind_move_up_and_lose_its_gpus() -> None:
    snap = dequeue(_fleet([A, NODE, B, C]), POOL, {"c1-n0"})
    assert _entry(snap, B) == QueueEntry("i-b", 2, 1, NOW + HOUR)
    assert _entry(snap, C) == QueueEntry("i-c", 3, 3, None)
    assert _entry(snap, NODE) is None


def test_without_a_known_end_or_capacity_there_is_no_eta() -> None:
    assert _entry(_fleet([A, B]), B, ends=()) == QueueEntry("i-b", 2, 1, None)
    no_hosts = FleetSnapshot.build([], tickets=[])
    assert queue_entry(no_hosts, POOL, A.order_key(), NOW) is None


def test_a_requeued_ticket_is_found_at_its_old_place() -> None:
    snap = enqueue(_fleet([B, C]), A)  # enqueued first, back after an interruption
    assert _entry(snap, A) == QueueEntry("i-a", 1, 0, NOW)
    assert _entry(snap, B) == QueueEntry("i-b", 2, 1, NOW + HOUR)


def _tickets() -> st.SearchStrategy[list[Ticket]]:
    one = st.builds(
        ticket,
        st.sampled_from(["i-", "c1-n"]).flatmap(
            lambda p: st.integers(0, 999).map(f"{p}{{}}".format)
        ),
        st.integers(1, 4),
        st.integers(0, 50),
    )
    return st.lists(one, max_size=40, unique_by=lambda t: t.subject_id)


@settings(max_examples=150, deadline=None)
@given(
    first=_tickets(),
    later=_tickets(),
    removed=st.sets(st.integers(0, 79), max_size=20),
    ends=st.lists(st.tuples(st.integers(NOW, NOW + 10 * HOUR), st.integers(1, 4)), max_size=4),
)
def test_every_tickets_entry_is_the_walks_across_chunks_inserts_and_removals(
    first: list[Ticket], later: list[Ticket], removed: set[int], ends: list[GpusFreed]
) -> None:
    with patch.object(fifo, "CHUNK", 4):  # small chunks: places span many of them
        snap = _fleet(first)
        seen = {t.subject_id for t in first}
        for t in later:
            if t.subject_id not in seen:
                seen.add(t.subject_id)
                snap = enqueue(snap, t)
        everyone = list(snap.queue(POOL))
        gone = {everyone[i].subject_id for i in removed if i < len(everyone)}
        snap = dequeue(snap, POOL, gone)
    queue = snap.queue(POOL)
    assert queue.chunk_gpus == tuple(sum(t.gpus for t in c) for c in queue.chunks)
    assert queue.gpus == sum(t.gpus for t in queue)
    walk = queue_status(snap, POOL, NOW, ends)
    gpus = PoolGpus.of(snap, POOL, ends)
    assert [queue_entry(snap, POOL, t.order_key(), NOW, gpus) for t in queue] == walk
    for t in everyone:
        if t.subject_id in gone:
            assert queue_entry(snap, POOL, t.order_key(), NOW, gpus) is None


def test_place_counts_tickets_and_gpus_of_the_chunks_before() -> None:
    with patch.object(fifo, "CHUNK", 2):
        queue = TicketQueue.of(ticket(f"t{i}", i % 3 + 1, enqueued_at=i) for i in range(7))
    assert len(queue.chunks) == 4
    place = queue.place((5, "t5"))
    assert place is not None
    assert (place.ticket.subject_id, place.index, place.gpus_ahead) == ("t5", 5, 1 + 2 + 3 + 1 + 2)
    assert queue.place((5, "t4")) is None and queue.place((99, "t9")) is None
    assert TicketQueue().place((0, "a")) is None
