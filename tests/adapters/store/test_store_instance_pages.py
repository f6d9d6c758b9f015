"""`Store.live_instances()` and `Store.instances_page()`, run against every backend.

Both are what the served control plane reads as it grows: the live instances once at a takeover,
and one account's instances a page at a time for `GET /v1/instances`. The cases are a table over
one fixed set of instances of two accounts, with ties on `created_at` and every kind of status.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from store_support import launch, state

from lowcostgpu.domain.status import LIVE_INSTANCE_STATUSES, InstanceStatus
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import Commit, InstanceWrite

S = InstanceStatus
# id, account, created_at, status: acct-1 has a tie at 200 (broken by id: i-a3 before i-a2).
ROWS = [
    ("i-a1", "acct-1", 100, S.RUNNING),
    ("i-a2", "acct-1", 200, S.QUEUED),
    ("i-a3", "acct-1", 200, S.STOPPED),
    ("i-a4", "acct-1", 300, S.DELETED),
    ("i-a5", "acct-1", 400, S.INTERRUPTED),
    ("i-a6", "acct-1", 50, S.SUCCEEDED),
    ("i-b1", "acct-2", 250, S.RUNNING),
    ("i-b2", "acct-2", 200, S.QUEUED),
]
A_NEWEST_FIRST = ["i-a5", "i-a3", "i-a2", "i-a1", "i-a6"]  # deleted left out
QR = frozenset({S.QUEUED, S.RUNNING})


def seed(store: Store, rows: list[tuple[str, str, int, InstanceStatus]] = ROWS) -> None:
    store.commit(
        Commit(
            instances=[
                InstanceWrite(
                    state(i, account_id=account, status=status),
                    None,
                    launch(i, account_id=account, created_at=at),
                )
                for i, account, at, status in rows
            ]
        )
    )


PAGES: list[tuple[str, str, dict[str, Any], list[str]]] = [
    ("everything, newest first", "acct-1", {"limit": 50}, A_NEWEST_FIRST),
    ("a page exactly full", "acct-1", {"limit": 5}, A_NEWEST_FIRST),
    ("the first page", "acct-1", {"limit": 2}, ["i-a5", "i-a3"]),
    ("one row", "acct-1", {"limit": 1}, ["i-a5"]),
    ("no rows asked", "acct-1", {"limit": 0}, []),
    (
        "after the cursor, not it",
        "acct-1",
        {"limit": 50, "before": (200, "i-a3")},
        A_NEWEST_FIRST[2:],
    ),
    ("a tie broken by id", "acct-1", {"limit": 1, "before": (200, "i-a3")}, ["i-a2"]),
    (
        "a cursor between ties",
        "acct-1",
        {"limit": 50, "before": (200, "i-a25")},
        ["i-a2", "i-a1", "i-a6"],
    ),
    ("a cursor past the newest", "acct-1", {"limit": 2, "before": (10**12, "")}, ["i-a5", "i-a3"]),
    ("after the last page", "acct-1", {"limit": 5, "before": (50, "i-a6")}, []),
    (
        "deleted ones asked for",
        "acct-1",
        {"limit": 50, "include_deleted": True},
        ["i-a5", "i-a4", *A_NEWEST_FIRST[1:]],
    ),
    ("a status filter", "acct-1", {"limit": 50, "statuses": QR}, ["i-a2", "i-a1"]),
    (
        "a status filter past a cursor",
        "acct-1",
        {"limit": 50, "statuses": QR, "before": (200, "i-a2")},
        ["i-a1"],
    ),
    (
        "a status filter that names deleted",
        "acct-1",
        {"limit": 50, "statuses": frozenset({S.DELETED})},
        ["i-a4"],
    ),
    ("a status no instance has", "acct-1", {"limit": 50, "statuses": frozenset({S.FAILED})}, []),
    ("the other account", "acct-2", {"limit": 50}, ["i-b1", "i-b2"]),
    (
        "the other account, with a cursor from acct-1's rows",
        "acct-2",
        {"limit": 50, "before": (300, "i-a4")},
        ["i-b1", "i-b2"],
    ),
    ("an account with none", "acct-3", {"limit": 50, "include_deleted": True}, []),
]


@pytest.mark.parametrize(
    ("account", "kwargs", "expected"), [p[1:] for p in PAGES], ids=[p[0] for p in PAGES]
)
def test_a_page_of_an_accounts_instances(
    store: Store, account: str, kwargs: dict[str, Any], expected: list[str]
) -> None:
    seed(store)
    page = store.instances_page(account, **kwargs)
    assert [s.state.id for s in page] == expected
    assert all(s.launch.account_id == account and s.version == 1 for s in page)


@pytest.mark.parametrize("limit", [1, 2, 3, 6, 7])
def test_following_the_cursor_reads_every_instance_once(store: Store, limit: int) -> None:
    seed(store)
    seen: list[str] = []
    before: tuple[int, str] | None = None
    while True:
        page = store.instances_page("acct-1", limit=limit, before=before, include_deleted=True)
        seen += [s.state.id for s in page]
        if len(page) < limit:
            break
        before = (page[-1].launch.created_at, page[-1].state.id)
    assert seen == ["i-a5", "i-a4", "i-a3", "i-a2", "i-a1", "i-a6"]


def test_a_page_keeps_the_launch_order_when_instances_change(store: Store) -> None:
    """`created_at` is the launch's, written once: updating an instance does not move it."""
    seed(store)
    a1 = store.instance("i-a1")
    store.commit(Commit(instances=[InstanceWrite(replace(a1.state, status=S.SUCCEEDED), 1)]))
    ids = [s.state.id for s in store.instances_page("acct-1", limit=50)]
    assert ids == A_NEWEST_FIRST
    assert store.instances_page("acct-1", limit=50, before=(200, "i-a2"))[0].version == 2


def test_the_live_statuses_are_the_ones_work_still_happens_in() -> None:
    assert (
        frozenset({S.QUEUED, S.STARTING, S.RUNNING, S.INTERRUPTING, S.STOPPING, S.INTERRUPTED})
        == LIVE_INSTANCE_STATUSES
    )


def test_live_instances_are_those_of_a_live_status_of_every_account_by_id(store: Store) -> None:
    every = [(f"i-{n:02d}-{s.value}", f"acct-{n % 2}", n, s) for n, s in enumerate(S)]
    seed(store, list(reversed(every)))
    live = store.live_instances()
    assert [s.state.id for s in live] == sorted(
        i for i, *_, st in every if st in LIVE_INSTANCE_STATUSES
    )
    assert {s.state.status for s in live} == LIVE_INSTANCE_STATUSES
    assert {s.launch.account_id for s in live} == {"acct-0", "acct-1"}
    running = store.instance("i-02-running")
    finished = replace(running.state, status=S.SUCCEEDED)
    store.commit(Commit(instances=[InstanceWrite(finished, running.version)]))
    assert "i-02-running" not in {s.state.id for s in store.live_instances()}


def test_no_instances_none_live(store: Store) -> None:
    assert store.live_instances() == []
    assert store.instances_page("acct-1", limit=10) == []
