"""Long-polls that hold no thread: a waiting request awaits a watch of the store's new events.

Why: a sync endpoint that sleeps between store reads holds one of anyio's 40 worker threads for
its whole wait — 60 waiting `GET /v1/events?wait_s=60` made an ordinary GET wait 28.8 s. Here a
waiting request is a coroutine parked on an `asyncio.Event`. One watch per server reads the
events committed since its last look — one indexed read every `WATCH_S` while anyone waits,
whatever the number of waiters, and none while nobody waits — and wakes only the waiters of the
accounts that got one, with those events: a poll without filters answers with them and reads
nothing; one with filters looks again (its filters are the store's). The
watch reads the store rather than hooking this process's commits, so a standby server, whose
events another process commits, wakes its waiters too.

Nothing is missed: a waiter registers with its mark, the latest seq of all accounts read before
its look (`app.events.look`). Seqs are one order across accounts, so the watch, which has read
every event up to its own `seen`, wakes a waiter whose mark is below it at once.

Waiting is capped, per account and in all (`MAX_WAITING_PER_ACCOUNT`, `MAX_WAITING`): beyond the
cap a request is answered 429 with `Retry-After`, so one account cannot use up the server's
sockets and memory. Looks run in their own small thread limiter (`LOOK_THREADS`), so a burst of
woken waiters never queues an ordinary request behind it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from fastapi import Request
from fastapi.responses import JSONResponse

from lowcostgpu.ports.store import EventRecord, Store

log = logging.getLogger(__name__)
T = TypeVar("T")

WATCH_S = 0.1  # how often the watch reads the newest events while anyone waits
BATCH = 1000  # events read per look of the watch; more than that wakes every waiter
MAX_WAITING = 2000  # waiting long-polls (events and log followers) of the whole server
MAX_WAITING_PER_ACCOUNT = 200  # of one account
LOOK_THREADS = 8  # threads that the reads of long-polls may use at once
RETRY_AFTER_S = 5
ERROR_BACKOFF_S = 1.0  # the watch's pause after a failed read (the store is down): it goes on

TOO_MANY: dict[int | str, dict[str, Any]] = {
    429: {"description": "too many waiting requests (of the account, or in all)"}
}


class TooManyWaiting(Exception):
    """No slot left for a waiting request; `scope` says whose cap is reached."""

    def __init__(self, scope: str, cap: int) -> None:
        super().__init__(scope)
        self.scope, self.cap = scope, cap


def too_many(exc: TooManyWaiting, what: str) -> JSONResponse:
    """The 429 answer: what is full and what to do, and when to try again."""
    body = {
        "code": "too_many_waiting",
        "message": f"{exc.cap} {what} already wait ({exc.scope}); this one was not started",
        "hint": f"retry after {RETRY_AFTER_S} s, or end some of the waiting requests first",
        "details": {"retry_after_s": RETRY_AFTER_S},
    }
    return JSONResponse(body, status_code=429, headers={"Retry-After": str(RETRY_AFTER_S)})


@dataclass(eq=False)
class _Waiter:
    account_id: str
    mark: int
    woken: asyncio.Event = field(default_factory=asyncio.Event)
    events: list[EventRecord] | None = None  # the account's new events, when the watch has them


class EventWatch:
    """The waiting requests of one server (one event loop) and the watch that wakes them."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.loop = asyncio.get_running_loop()
        self.looks = 0  # reads of the newest events by the watch (not per waiter)
        self._limiter = anyio.CapacityLimiter(LOOK_THREADS)
        self._waiters: dict[str, set[_Waiter]] = {}
        self._held: Counter[str] = Counter()  # slots held, by account
        self._seen: int | None = None  # every event up to this seq has woken its waiters
        self._task: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        """Slots held now (waiting long-polls and log followers)."""
        return self._held.total()

    def hold(self, account_id: str) -> Callable[[], None]:
        """Take one of the waiting slots, or raise `TooManyWaiting` (nothing is taken then);
        returns what gives it back (idempotent: a second call does nothing)."""
        if self.waiting >= MAX_WAITING:
            raise TooManyWaiting("on this server", MAX_WAITING)
        if self._held[account_id] >= MAX_WAITING_PER_ACCOUNT:
            raise TooManyWaiting("of this account", MAX_WAITING_PER_ACCOUNT)
        self._held[account_id] += 1
        held = [True]

        def release() -> None:
            if held.pop() if held else False:
                self._held[account_id] -= 1
                if self._held[account_id] <= 0:
                    del self._held[account_id]

        return release

    @contextmanager
    def slot(self, account_id: str) -> Iterator[None]:
        """A waiting slot held for the `with` block (see `hold`)."""
        release = self.hold(account_id)
        try:
            yield
        finally:
            release()

    async def read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn` in a worker thread of the long-polls' own limiter (a brief store read)."""
        return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs), limiter=self._limiter)

    async def wait(self, account_id: str, mark: int, timeout_s: float) -> list[EventRecord] | None:
        """Until an event after `mark` may have come for the account, or `timeout_s` passed.

        Returns the account's events that the watch read, when it has them all: every one after
        the waiter's look (which found none up to its mark); else None, and the waiter looks."""
        if self._seen is not None and mark < self._seen:
            return None  # the watch read past the mark before this waiter was here: look now
        waiter = _Waiter(account_id, mark)
        self._waiters.setdefault(account_id, set()).add(waiter)
        if self._task is None:
            self._task = self.loop.create_task(self._watch(), name="event-watch")
        try:
            await asyncio.wait_for(waiter.woken.wait(), max(0.0, timeout_s))
        except TimeoutError:
            return None
        finally:
            waiting = self._waiters.get(account_id)
            if waiting is not None:
                waiting.discard(waiter)
                if not waiting:
                    del self._waiters[account_id]
        return waiter.events

    async def _watch(self) -> None:
        """Look every `WATCH_S` while anyone waits; a failed look is logged, and it goes on."""
        try:
            while self._waiters:
                await asyncio.sleep(WATCH_S)
                if self._seen is None:
                    marks = [w.mark for ws in self._waiters.values() for w in ws]
                    self._seen = min(marks, default=0)
                try:
                    await self._look()
                except Exception:  # the store is down, say: waiters time out, nobody crashes
                    log.exception("the event watch could not read the newest events")
                    await asyncio.sleep(ERROR_BACKOFF_S)
        finally:
            self._task, self._seen = None, None

    async def _look(self) -> None:
        seen = self._seen or 0
        new = await self.read(self.store.events, after_seq=seen, limit=BATCH)
        self.looks += 1
        if len(new) >= BATCH:  # a burst: every waiter looks for itself, from after this read
            latest = await self.read(self.store.latest_seq)
            self._wake({a: None for a in self._waiters})
            self._seen = max(seen, latest)
        elif new:
            by_account: dict[str, list[EventRecord]] = {}
            for e in new:
                by_account.setdefault(e.account_id, []).append(e)
            self._wake(by_account)
            self._seen = new[-1].seq or seen

    def _wake(self, accounts: Mapping[str, list[EventRecord] | None]) -> None:
        for account_id, events in accounts.items():
            for waiter in self._waiters.get(account_id, ()):
                waiter.events = events
                waiter.woken.set()


async def unless_gone(request: Request, work: Coroutine[Any, Any, T]) -> T | None:
    """`work`'s result, or None as soon as the client hangs up (then `work` is cancelled, and
    its waiter and slot are given back at once, not at its deadline)."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_hung_up(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (task, gone):
            t.cancel()
    return task.result() if task.done() and not task.cancelled() else None


async def _hung_up(request: Request) -> None:
    """Returns when the server receives the client's disconnect (a GET has no body to read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def watch_of(request: Request, store: Store) -> EventWatch:
    """The app's watch for the running event loop (made at the first long-poll)."""
    watch: EventWatch | None = getattr(request.app.state, "event_watch", None)
    if watch is None or watch.loop is not asyncio.get_running_loop():
        watch = request.app.state.event_watch = EventWatch(store)
    return watch
