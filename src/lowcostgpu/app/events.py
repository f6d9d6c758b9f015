"""Reading an account's events: filtered listings and long-polls that resume from a cursor.

The store numbers events with `seq` as they are committed, so a reader that asks for "after n"
never misses one and never sees one twice: the cursor is the last seq it received. The filters
are the store's (`Store.events` applies them in its query, an index serves one object's events),
so a filtered request costs what it returns, not the account's history; a filtered page is still
a prefix of the unfiltered order, so a caller may resume from the last seq it got.

Every answer also carries the account's latest seq, read before the events: following from the
larger of it and the last seq received misses nothing and skips the history a filter rejected.

Waiting (a long-poll) is the API's: `api.longpoll` parks a waiting request on a watch of the
store's newest events, so a waiter holds no thread and reads nothing until its account gets one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from lowcostgpu.domain import errors
from lowcostgpu.domain.events import Reason
from lowcostgpu.ports.store import EventRecord, Store

MAX_WAIT_S = 60.0  # the longest a long-poll waits (`GET /v1/events?wait_s=`)
MAX_SEQ = 2**63 - 1  # the largest seq (and time) the store holds: a signed 64-bit column


class StoreFilters(TypedDict):
    """The keyword arguments of `Store.events` that a filter sets."""

    object_kind: str | None
    object_id: str | None
    object_prefix: str | None
    reason: str | None
    since: int | None


@dataclass(frozen=True, slots=True)
class EventFilter:
    """What a caller wants to see; every field that is set must match.

    `object_ref` is an object id (`i-…`), `kind/id` (`instance/i-…`), or either ending in `*`
    for the ids that start with it (`c-…*`: a cluster and its nodes, `c-…-n1`); `since` is a
    timestamp (events at or after it).
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
        if self.object_ref is not None and not self._object()[1].rstrip("*"):
            raise errors.InvalidRequest(
                f"object filter {self.object_ref!r} names no object",
                hint="give an object id (i-…), kind/id (instance/i-…), or an id prefix ending in *",
            )

    def _object(self) -> tuple[str | None, str]:
        kind, sep, oid = (self.object_ref or "").rpartition("/")
        return (kind if sep else None), oid

    def store_filters(self) -> StoreFilters:
        """The arguments of `Store.events` that select these events."""
        kind, oid = self._object() if self.object_ref is not None else (None, None)
        prefix = oid[:-1] if oid is not None and oid.endswith("*") else None
        return StoreFilters(
            object_kind=kind,
            object_id=None if prefix is not None else oid,
            object_prefix=prefix,
            reason=self.reason,
            since=self.since,
        )


@dataclass(frozen=True, slots=True)
class Page:
    """Events in seq order, and the account's latest seq when the read began."""

    events: list[EventRecord]
    latest_seq: int


def find(
    store: Store,
    account_id: str,
    *,
    after: int = 0,
    where: EventFilter,
    limit: int = 200,
    before: int | None = None,
    newest: bool = False,
) -> Page:
    """The account's events with `after < seq < before` that match, in seq order, at most
    `limit`: the first ones, or with `newest` the last ones (a page of recent events)."""
    latest = store.latest_seq(account_id)  # before the events: nothing newer can be skipped
    found = store.events(
        after_seq=after,
        account_id=account_id,
        limit=limit,
        before_seq=before,
        newest=newest,
        **where.store_filters(),
    )
    return Page(found, latest)


def look(
    store: Store,
    account_id: str,
    *,
    after: int,
    where: EventFilter,
    limit: int,
    before: int | None = None,
    newest: bool = False,
) -> tuple[Page, int]:
    """`find`, and the latest seq of every account's events read before it (its mark).

    A long-poll that found nothing waits for a commit after its mark: the seqs are one order
    across accounts, so a watch that has already read past the mark (`api.longpoll`) knows the
    look may have missed an event and sends the poll to look again at once."""
    mark = store.latest_seq()
    page = find(
        store, account_id, after=after, where=where, limit=limit, before=before, newest=newest
    )
    return page, mark
