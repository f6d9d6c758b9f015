"""Reading an account's events: filtered listings and long-polls that resume from a cursor.

The store numbers events with `seq` as they are committed, so a reader that asks for "after n"
never misses one and never sees one twice: the cursor is the last seq it received. Filters are
applied while paging through the account's events in seq order, so a filtered page is still a
prefix of the unfiltered order (a caller may resume from the last seq it got).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from lowcostgpu.domain import errors
from lowcostgpu.domain.events import Reason
from lowcostgpu.ports.store import EventRecord, Store

PAGE = 1000
POLL_S = 0.1  # how often a waiting long-poll looks for new events
MAX_WAIT_S = 60.0


@dataclass(frozen=True, slots=True)
class EventFilter:
    """What a caller wants to see; every field that is set must match.

    `object_ref` is an object id (`i-…`) or `kind/id` (`instance/i-…`); `since` is a timestamp
    (events at or after it).
    """

    object_ref: str | None = None
    reason: str | None = None
    since: int | None = None

    def check(self) -> None:
        if self.reason is not None and self.reason not in set(Reason):
            raise errors.InvalidRequest(
                f"unknown event reason {self.reason!r}",
                hint="one of: " + ", ".join(sorted(str(r) for r in Reason)),
            )

    def matches(self, e: EventRecord) -> bool:
        if self.reason is not None and str(e.reason) != self.reason:
            return False
        if self.since is not None and e.at < self.since:
            return False
        if self.object_ref is not None:
            kind, sep, oid = self.object_ref.rpartition("/")
            if oid != e.object_id or (sep and kind != e.object_kind):
                return False
        return True


def find(
    store: Store, account_id: str, *, after: int = 0, where: EventFilter, limit: int = 200
) -> list[EventRecord]:
    """The account's events with seq > `after` that match, in seq order, at most `limit`."""
    found: list[EventRecord] = []
    cursor = after
    while len(found) < limit:
        page = store.events(after_seq=cursor, account_id=account_id, limit=PAGE)
        for e in page:
            if where.matches(e):
                found.append(e)
                if len(found) == limit:
                    break
        if len(page) < PAGE:
            break
        cursor = page[-1].seq or cursor
    return found


def wait_for(
    store: Store,
    account_id: str,
    *,
    after: int,
    where: EventFilter,
    limit: int,
    wait_s: float,
) -> list[EventRecord]:
    """Like `find`, but waits up to `wait_s` for a first matching event (a long-poll).

    Returns as soon as one is committed (within `POLL_S`), or an empty list at the deadline.
    """
    deadline = time.monotonic() + min(wait_s, MAX_WAIT_S)
    while True:
        found = find(store, account_id, after=after, where=where, limit=limit)
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(POLL_S)
