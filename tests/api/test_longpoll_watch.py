"""`api.longpoll.EventWatch`: waiting requests hold no thread and cost one read per look of the
watch, whatever their number; a waiter wakes for its account's events only, and never misses one
that came between its look and its wait; waiting slots are capped per account and in all."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from lowcostgpu.adapters.store.memory import MemoryStore
from lowcostgpu.api import longpoll
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.ports.store import EventRecord
from lowcostgpu.ports.store_records import Commit

T = TypeVar("T")
DEADLINE_S = 30.0  # how long a test waits for a state that must come (a loaded machine too)
LONG_S = 120.0  # a wait that must not end by itself during a test


class CountingStore(MemoryStore):
    """A memory store that counts its reads of events, and fails the first `failures` of them."""

    def __init__(self, failures: int = 0) -> None:
        super().__init__()
        self.reads = 0
        self.failures = failures

    def events(self, **kwargs: Any) -> list[EventRecord]:  # type: ignore[override]
        self.reads += 1
        if self.failures > 0:
            self.failures -= 1
            raise OSError("the store is down")
        return super().events(**kwargs)


def _commit(store: MemoryStore, *accounts: str) -> None:
    n = store.latest_seq()
    store.commit(
        Commit(
            events=[
                EventRecord(
                    f"e{n + i}", 0, a, "instance", "i-1", EventType.NORMAL, Reason.STARTED, ""
                )
                for i, a in enumerate(accounts, 1)
            ]
        )
    )


def run(test: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(asyncio.wait_for(test(), DEADLINE_S * 2))


async def until(ready: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while not ready():
        assert asyncio.get_running_loop().time() < deadline, f"not within {DEADLINE_S} s: {what}"
        await asyncio.sleep(0.01)


async def waiting(watch: longpoll.EventWatch, account_id: str, n: int) -> list[asyncio.Task[None]]:
    """`n` waiters of `account_id`, each from the store's latest seq, registered."""
    mark = watch.store.latest_seq()
    tasks = [asyncio.create_task(watch.wait(account_id, mark, LONG_S)) for _ in range(n)]
    await asyncio.sleep(0)  # each runs up to its wait
    return tasks


def test_a_waiter_wakes_for_its_accounts_event_and_not_for_anothers() -> None:
    async def test() -> None:
        store = MemoryStore()
        watch = longpoll.EventWatch(store)
        (mine,) = await waiting(watch, "acct-1", 1)
        (theirs,) = await waiting(watch, "acct-2", 1)
        _commit(store, "acct-2")
        await until(theirs.done, "acct-2's waiter wakes")
        await until(lambda: watch.looks >= 3, "the watch looks twice more")
        assert not mine.done()  # nothing came for acct-1: only its timeout could end it
        _commit(store, "acct-1")
        await until(mine.done, "acct-1's waiter wakes")
        await until(lambda: watch._task is None, "the watch stops once nobody waits")

    run(test)


@pytest.mark.parametrize("waiters", [1, 300])
def test_the_watch_reads_once_per_look_whatever_the_number_of_waiters(waiters: int) -> None:
    async def test() -> None:
        store = CountingStore()
        watch = longpoll.EventWatch(store)
        threads = threading.active_count()
        tasks = await waiting(watch, "acct-1", waiters)
        await until(lambda: watch.looks >= 5, "five looks")
        _commit(store, "acct-2")  # another account's: nobody here wakes, nobody reads
        await until(lambda: watch.looks >= 10, "five more looks")
        assert store.reads == watch.looks and not any(t.done() for t in tasks)
        assert threading.active_count() - threads <= longpoll.LOOK_THREADS  # none per waiter
        _commit(store, "acct-1")
        await until(lambda: all(t.done() for t in tasks), "every waiter of acct-1 wakes")

    run(test)


def test_a_mark_below_what_the_watch_has_seen_looks_again_at_once() -> None:
    """An event committed between a poll's look and its wait, and already read by the watch,
    is not missed: the poll's mark is below the watch's `seen`, so it does not wait."""

    async def test() -> None:
        store = MemoryStore()
        watch = longpoll.EventWatch(store)
        await waiting(watch, "acct-keep", 1)  # keeps the watch looking
        late_mark = store.latest_seq()
        _commit(store, "acct-1")
        await until(lambda: (watch._seen or 0) > late_mark, "the watch reads the event")
        await asyncio.wait_for(watch.wait("acct-1", late_mark, LONG_S), DEADLINE_S)
        current = store.latest_seq()
        (after_it,) = await waiting(watch, "acct-1", 1)  # a mark at `seen`: it waits
        await until(lambda: watch.looks >= 3, "more looks")
        assert not after_it.done() and current == store.latest_seq()
        after_it.cancel()

    run(test)


def test_a_burst_larger_than_a_batch_wakes_every_waiter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(longpoll, "BATCH", 5)

    async def test() -> None:
        store = MemoryStore()
        watch = longpoll.EventWatch(store)
        (other,) = await waiting(watch, "acct-quiet", 1)
        _commit(store, *["acct-busy"] * 5)  # a full batch: who else got one is not known
        await until(other.done, "the waiter of another account looks for itself")
        assert watch._seen == store.latest_seq()

    run(test)


def test_a_failed_read_of_the_watch_is_logged_and_the_watch_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(longpoll, "ERROR_BACKOFF_S", 0.05)

    async def test() -> None:
        store = CountingStore(failures=2)
        watch = longpoll.EventWatch(store)
        (waiter,) = await waiting(watch, "acct-1", 1)
        await until(lambda: store.failures == 0, "two failed reads")
        _commit(store, "acct-1")
        await until(waiter.done, "the waiter wakes after the store is back")

    run(test)
    assert "could not read the newest events" in caplog.text


@pytest.mark.parametrize(
    ("per_account", "total", "held", "then", "refused"),
    [
        (3, 10, {"a": 2}, "a", None),  # one below the account's cap
        (3, 10, {"a": 3}, "a", "of this account"),  # at it
        (3, 10, {"a": 3}, "b", None),  # another account is not limited by a's
        (3, 5, {"a": 3, "b": 1}, "c", None),  # one below the server's cap
        (3, 5, {"a": 3, "b": 2}, "c", "on this server"),  # at it
    ],
)
def test_waiting_slots_are_capped_per_account_and_in_all(
    monkeypatch: pytest.MonkeyPatch,
    per_account: int,
    total: int,
    held: dict[str, int],
    then: str,
    refused: str | None,
) -> None:
    monkeypatch.setattr(longpoll, "MAX_WAITING_PER_ACCOUNT", per_account)
    monkeypatch.setattr(longpoll, "MAX_WAITING", total)

    async def test() -> None:
        watch = longpoll.EventWatch(MemoryStore())
        releases = [watch.hold(a) for a, n in held.items() for _ in range(n)]
        if refused is None:
            watch.hold(then)()
        else:
            with pytest.raises(longpoll.TooManyWaiting) as caught:
                watch.hold(then)
            assert caught.value.scope == refused
        assert watch.waiting == sum(held.values())  # a refusal takes nothing
        releases[0]()
        releases[0]()  # a second release gives nothing back twice
        assert watch.waiting == sum(held.values()) - 1
        watch.hold(then)()  # a freed slot is taken again

    run(test)


@pytest.mark.parametrize(
    ("commits", "handed"),
    [
        ([["acct-1"]], 1),  # one event of the account
        ([["acct-1", "acct-2", "acct-1"]], 2),  # its events of a commit, not another account's
    ],
)
def test_a_woken_waiter_is_handed_its_accounts_new_events(
    commits: list[list[str]], handed: int
) -> None:
    async def test() -> None:
        store = MemoryStore()
        watch = longpoll.EventWatch(store)
        (waiter,) = await waiting(watch, "acct-1", 1)
        for accounts in commits:
            _commit(store, *accounts)
        await until(waiter.done, "the waiter wakes")
        events = waiter.result()
        assert events is not None and len(events) == handed
        assert {e.account_id for e in events} == {"acct-1"}
        assert [e.seq for e in events] == sorted(e.seq for e in events)

    run(test)


@pytest.mark.parametrize("why", ["timeout", "burst", "mark below seen"])
def test_a_waiter_that_must_look_for_itself_is_handed_nothing(
    monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    monkeypatch.setattr(longpoll, "BATCH", 3)

    async def test() -> None:
        store = MemoryStore()
        watch = longpoll.EventWatch(store)
        if why == "timeout":
            assert await watch.wait("acct-1", store.latest_seq(), 0.05) is None
            return
        await waiting(watch, "acct-keep", 1)  # keeps the watch looking
        mark = store.latest_seq()
        (waiter,) = await waiting(watch, "acct-1", 1)
        _commit(store, *["acct-1"] * (3 if why == "burst" else 1))  # a full batch: a burst
        await until(waiter.done, "the waiter wakes")
        if why == "burst":
            assert waiter.result() is None
        else:
            assert waiter.result() is not None  # handed; a wait from the old mark is not
            assert await asyncio.wait_for(watch.wait("acct-1", mark, LONG_S), DEADLINE_S) is None

    run(test)
