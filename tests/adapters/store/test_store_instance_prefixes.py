"""`Store.instances_with_prefix()`: what resolves a short instance id, run against every backend.

One account's instances whose id starts with the prefix, by id, at most `limit`; another
account's never, whatever their ids; deleted ones only when asked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from store_support import launch, sqlite_plan_of_instances_read, state

from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import Commit, InstanceWrite

S = InstanceStatus
ROWS = [
    ("i-c24f09a1", "acct-1", S.RUNNING),
    ("i-c24f1b00", "acct-1", S.QUEUED),
    ("i-c2500000", "acct-1", S.STOPPED),
    ("i-c24f0999", "acct-1", S.DELETED),
    ("i-9fffffff", "acct-1", S.RUNNING),
    ("i-a0000000", "acct-1", S.RUNNING),
    ("i-c24f09a2", "acct-2", S.RUNNING),  # the other account's, beside acct-1's
]

CASES: list[tuple[str, str, str, int, bool, list[str]]] = [
    ("a unique prefix", "acct-1", "i-c24f0", 3, False, ["i-c24f09a1"]),
    ("an ambiguous prefix, by id", "acct-1", "i-c24", 3, False, ["i-c24f09a1", "i-c24f1b00"]),
    ("the limit holds", "acct-1", "i-c2", 1, False, ["i-c24f09a1"]),
    ("a whole id", "acct-1", "i-c24f1b00", 3, False, ["i-c24f1b00"]),
    ("deleted ones when asked", "acct-1", "i-c24f0", 3, True, ["i-c24f0999", "i-c24f09a1"]),
    ("none starts so", "acct-1", "i-d", 3, False, []),
    ("a prefix ending in 9 is not a range past it", "acct-1", "i-9", 3, False, ["i-9fffffff"]),
    ("the other account's only", "acct-2", "i-c24", 3, False, ["i-c24f09a2"]),
    ("another account's id never matches", "acct-2", "i-c24f09a1", 3, True, []),
    ("an account with none", "acct-3", "i-", 3, True, []),
    ("no rows asked", "acct-1", "i-c", 0, False, []),
]


@pytest.mark.parametrize(
    ("account", "prefix", "limit", "deleted", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_the_instances_of_one_account_whose_id_starts_so(
    store: Store, account: str, prefix: str, limit: int, deleted: bool, expected: list[str]
) -> None:
    store.commit(
        Commit(
            instances=[
                InstanceWrite(state(i, account_id=a, status=status), None, launch(i, account_id=a))
                for i, a, status in ROWS
            ]
        )
    )
    found = store.instances_with_prefix(account, prefix, limit=limit, include_deleted=deleted)
    assert [s.state.id for s in found] == expected
    assert all(s.launch.account_id == account for s in found)


def test_the_prefix_read_is_an_index_search_not_a_table_scan_on_sqlite(tmp_path: Path) -> None:
    """The very statement `instances_with_prefix` sends: SQLite walks the id range of the
    account's (account_id, id) index (migration 0012), not all of the account's instances."""
    searched = sqlite_plan_of_instances_read(
        tmp_path, lambda store: store.instances_with_prefix("acct-1", "i-c2", limit=3)
    )
    assert "ix_instances_account_id" in searched and "id>? AND id<?" in searched, searched
    assert "SCAN instances" not in searched, searched
