"""`Store.events(since=, until=)`: a time window of the log, the same on every backend, combined
with the seq cursor, the account and the limit (how the operator's history pages a window)."""

from __future__ import annotations

import pytest
from test_store_contract import event

from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import Commit

TIMES = [100, 159, 160, 161, 219, 220]  # e1 … e6; boundary pairs at 160 and 220


@pytest.mark.parametrize(
    ("since", "until", "after_seq", "account", "limit", "expected"),
    [
        (None, None, 0, None, 1000, ["e1", "e2", "e3", "e4", "e5", "e6"]),
        (160, None, 0, None, 1000, ["e3", "e4", "e5", "e6"]),  # since: at >= since
        (161, None, 0, None, 1000, ["e4", "e5", "e6"]),
        (None, 160, 0, None, 1000, ["e1", "e2"]),  # until: at < until
        (None, 161, 0, None, 1000, ["e1", "e2", "e3"]),
        (160, 220, 0, None, 1000, ["e3", "e4", "e5"]),
        (160, 220, 3, None, 1000, ["e4", "e5"]),  # with the seq cursor
        (160, 220, 0, None, 2, ["e3", "e4"]),  # and the limit
        (160, 220, 0, "acct-2", 1000, ["e4"]),  # and the account
        (220, 160, 0, None, 1000, []),
    ],
)
def test_events_filter_by_time(
    store: Store,
    since: int | None,
    until: int | None,
    after_seq: int,
    account: str | None,
    limit: int,
    expected: list[str],
) -> None:
    for i, at in enumerate(TIMES, 1):
        store.commit(Commit(events=[event(f"e{i}", "acct-2" if i == 4 else "acct-1", at=at)]))
    got = store.events(
        after_seq=after_seq, account_id=account, limit=limit, since=since, until=until
    )
    assert [e.key for e in got] == expected
