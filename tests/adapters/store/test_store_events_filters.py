"""`Store.events(object_kind=, object_id=, object_prefix=, reason=, before_seq=, newest=)` and
`Store.latest_seq`: the same events on every backend, in seq order, each filtered page a prefix
of the filtered log (so a reader resumes from the last seq it got) and `newest` its tail."""

from __future__ import annotations

from typing import Any

import pytest

from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.ports.store import EventRecord, Store
from lowcostgpu.ports.store_records import Commit

# key: (account, kind, object id, reason); committed in this order, so e<n> has seq n
LOG = [
    ("acct-1", "instance", "i-1", Reason.QUEUED),
    ("acct-1", "cluster", "c-1", Reason.TARGET_CHANGED),
    ("acct-1", "instance", "i-1", Reason.STARTED),
    ("acct-2", "instance", "i-1", Reason.STARTED),  # another account's object of the same id
    ("acct-1", "node", "c-1-n1", Reason.NODE_ADDED),
    ("acct-1", "instance", "i-2", Reason.STARTED),
    ("acct-1", "node", "c-10", Reason.NODE_ADDED),  # an id c-1 is a prefix of, not a node of it
    ("acct-1", "instance", "i-1", Reason.PREEMPTED),
    ("acct-1", "node", "c-1-n2", Reason.NODE_ADDED),
    ("acct-1", "instance", "i-1", Reason.STARTED),
]


def _fill(store: Store) -> None:
    for n, (account, kind, oid, reason) in enumerate(LOG, 1):
        e = EventRecord(f"e{n}", 100 + n, account, kind, oid, EventType.NORMAL, reason, f"m{n}")
        store.commit(Commit(events=[e]))


def _expected(account: str = "acct-1", **wanted: Any) -> list[str]:
    """What a filter must return, computed here from LOG, in seq order."""
    prefix = wanted.pop("object_prefix", None)
    found = []
    for n, (a, kind, oid, reason) in enumerate(LOG, 1):
        row = {"object_kind": kind, "object_id": oid, "reason": reason}
        matches = all(row[k] == v for k, v in wanted.items())
        if a == account and matches and (prefix is None or oid.startswith(prefix)):
            found.append(f"e{n}")
    return found


FILTERS: list[dict[str, Any]] = [
    {"object_id": "i-1"},
    {"object_kind": "instance", "object_id": "i-1"},
    {"object_kind": "node", "object_id": "i-1"},
    {"object_kind": "node"},
    {"reason": Reason.STARTED},
    {"reason": "Started"},  # the reason's text, as the API passes it
    {"object_id": "i-1", "reason": Reason.STARTED},
    {"object_prefix": "c-1"},
    {"object_prefix": "c-1-n"},
    {"object_kind": "node", "object_prefix": "c-1"},
    {"object_id": "i-9"},
]


@pytest.mark.parametrize("wanted", FILTERS)
def test_each_filter_returns_the_matching_events_in_seq_order(
    store: Store, wanted: dict[str, Any]
) -> None:
    _fill(store)
    got = store.events(account_id="acct-1", **wanted)
    assert [e.key for e in got] == _expected(**wanted)
    assert [e.seq for e in got] == sorted(e.seq or 0 for e in got)


@pytest.mark.parametrize("wanted", FILTERS)
def test_paging_a_filter_from_the_last_seq_gives_each_event_once(
    store: Store, wanted: dict[str, Any]
) -> None:
    """Pages of 2 are prefixes of the filtered log: resuming from the last seq loses nothing."""
    _fill(store)
    seen: list[str] = []
    after = 0
    while page := store.events(account_id="acct-1", after_seq=after, limit=2, **wanted):
        assert [e.key for e in page] == _expected(**wanted)[len(seen) : len(seen) + 2]
        seen += [e.key for e in page]
        after = page[-1].seq or after
    assert seen == _expected(**wanted)


@pytest.mark.parametrize("wanted", FILTERS)
def test_newest_pages_back_from_the_tail_with_before_seq(
    store: Store, wanted: dict[str, Any]
) -> None:
    _fill(store)
    expected = _expected(**wanted)
    seen: list[str] = []
    before: int | None = None
    while page := store.events(
        account_id="acct-1", limit=2, newest=True, before_seq=before, **wanted
    ):
        keys = [e.key for e in page]
        assert keys == expected[len(expected) - len(seen) - len(keys) : len(expected) - len(seen)]
        seen = keys + seen
        before = page[0].seq
    assert seen == expected


def test_filters_combine_with_the_cursor_the_window_and_another_account(store: Store) -> None:
    _fill(store)
    assert [e.key for e in store.events(account_id="acct-1", object_id="i-1", after_seq=3)] == [
        "e8",
        "e10",
    ]
    window = store.events(account_id="acct-1", object_id="i-1", since=103, until=110)
    assert [e.key for e in window] == ["e3", "e8"]
    assert [e.key for e in store.events(account_id="acct-2", object_id="i-1")] == ["e4"]
    assert [e.key for e in store.events(object_id="i-1", reason="Started")] == ["e3", "e4", "e10"]
    assert [e.key for e in store.events(object_id="i-1", before_seq=4)] == ["e1", "e3"]


def test_latest_seq_is_the_accounts_last_event_or_zero(store: Store) -> None:
    assert store.latest_seq() == 0 and store.latest_seq("acct-1") == 0
    _fill(store)
    assert store.latest_seq() == 10
    assert store.latest_seq("acct-1") == 10
    assert store.latest_seq("acct-2") == 4
    assert store.latest_seq("acct-9") == 0
