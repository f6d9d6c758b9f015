"""`app.events`: filtered reads cost the events they return, not the account's log — the filters
are the store's (long-polls wait in `api.longpoll`: tests/api/test_longpoll_watch.py)."""

from __future__ import annotations

from typing import Any

import pytest

from lowcostgpu.adapters.store.memory import MemoryStore
from lowcostgpu.app import events as event_log
from lowcostgpu.domain import errors
from lowcostgpu.domain.events import EventType, Reason
from lowcostgpu.ports.store import EventRecord
from lowcostgpu.ports.store_records import Commit

HISTORY = 5000  # events of other objects before the ones a reader wants


class CountingStore(MemoryStore):
    """A memory store that counts the event rows it hands out and the cursors it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.rows_read = 0
        self.after_seqs: list[int] = []

    def events(self, **kwargs: Any) -> list[EventRecord]:  # type: ignore[override]
        found = super().events(**kwargs)
        self.rows_read += len(found)
        self.after_seqs.append(kwargs.get("after_seq", 0))
        return found


def _event(n: int, object_id: str, reason: Reason = Reason.STARTED) -> EventRecord:
    return EventRecord(f"e{n}", n, "acct-1", "instance", object_id, EventType.NORMAL, reason, "m")


@pytest.fixture
def store() -> CountingStore:
    s = CountingStore()
    s.commit(Commit(events=[_event(n, f"i-{n % 50 + 100}") for n in range(1, HISTORY + 1)]))
    s.commit(Commit(events=[_event(HISTORY + 1, "i-1"), _event(HISTORY + 2, "i-1", Reason.KILLED)]))
    s.rows_read = 0
    return s


def test_a_filtered_look_from_zero_reads_only_what_it_returns(store: CountingStore) -> None:
    where = event_log.EventFilter(object_ref="instance/i-1")
    page, mark = event_log.look(store, "acct-1", after=0, where=where, limit=200)
    assert [e.key for e in page.events] == [f"e{HISTORY + 1}", f"e{HISTORY + 2}"]
    assert store.rows_read == 2
    assert page.latest_seq == mark == HISTORY + 2


def test_a_reason_filter_reads_only_the_matching_events(store: CountingStore) -> None:
    page = event_log.find(store, "acct-1", where=event_log.EventFilter(reason="Killed"))
    assert [e.key for e in page.events] == [f"e{HISTORY + 2}"]
    assert store.rows_read == 1


def test_a_newest_page_is_the_tail_in_seq_order(store: CountingStore) -> None:
    page = event_log.find(store, "acct-1", where=event_log.EventFilter(), limit=3, newest=True)
    assert [e.seq for e in page.events] == [HISTORY, HISTORY + 1, HISTORY + 2]
    older = event_log.find(
        store, "acct-1", where=event_log.EventFilter(), limit=2, newest=True, before=HISTORY
    )
    assert [e.seq for e in older.events] == [HISTORY - 2, HISTORY - 1]
    assert store.rows_read == 5


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("i-1", {"object_kind": None, "object_id": "i-1", "object_prefix": None}),
        ("node/c-1-n1", {"object_kind": "node", "object_id": "c-1-n1", "object_prefix": None}),
        ("c-1*", {"object_kind": None, "object_id": None, "object_prefix": "c-1"}),
        ("node/c-1-n*", {"object_kind": "node", "object_id": None, "object_prefix": "c-1-n"}),
    ],
)
def test_an_object_ref_becomes_the_store_filters(ref: str, expected: dict[str, Any]) -> None:
    filters = event_log.EventFilter(object_ref=ref).store_filters()
    assert {k: filters[k] for k in expected} == expected  # type: ignore[literal-required]


@pytest.mark.parametrize("ref", ["", "*", "instance/", "instance/*"])
def test_an_object_ref_naming_nothing_is_a_clear_error(ref: str) -> None:
    with pytest.raises(errors.InvalidRequest, match="names no object"):
        event_log.EventFilter(object_ref=ref).check()
