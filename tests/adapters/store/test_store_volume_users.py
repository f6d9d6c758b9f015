"""`Store.instances_naming_volume()`: what keeps a volume in use, run against every backend.

The ids of one account's instances that are not deleted and whose launch names the volume, by
id, at most `limit`; another account's instances never, whatever their volume is called.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from store_support import launch, sqlite_plan_of_instances_read, state

from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import Commit, InstanceWrite

S = InstanceStatus
ROWS: list[tuple[str, str, str | None, InstanceStatus]] = [
    ("i-0003", "acct-1", "ckpts", S.RUNNING),
    ("i-0001", "acct-1", "ckpts", S.STOPPED),  # a stopped one may be resumed onto it
    ("i-0002", "acct-1", "ckpts", S.QUEUED),
    ("i-0004", "acct-1", "ckpts", S.DELETED),  # a deleted one keeps nothing in use
    ("i-0005", "acct-1", "data", S.RUNNING),
    ("i-0006", "acct-1", None, S.RUNNING),
    ("i-0007", "acct-1", "", S.RUNNING),  # "" names no volume
    ("i-0008", "acct-2", "ckpts", S.RUNNING),  # the other account's volume of the same name
]

CASES: list[tuple[str, str, str, int | None, list[str]]] = [
    ("its users by id, deleted ones not", "acct-1", "ckpts", None, ["i-0001", "i-0002", "i-0003"]),
    ("the limit holds, by id", "acct-1", "ckpts", 2, ["i-0001", "i-0002"]),
    ("a limit above the users", "acct-1", "ckpts", 6, ["i-0001", "i-0002", "i-0003"]),
    ("another volume's users only", "acct-1", "data", None, ["i-0005"]),
    ("the other account's namesake", "acct-2", "ckpts", None, ["i-0008"]),
    ("an account with none of that name", "acct-2", "data", None, []),
    ("a volume nobody names", "acct-1", "other", None, []),
    ("no rows asked", "acct-1", "ckpts", 0, []),
]


@pytest.mark.parametrize(
    ("account", "name", "limit", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_volumes_users_are_the_accounts_instances_not_deleted_that_name_it(
    store: Store, account: str, name: str, limit: int | None, expected: list[str]
) -> None:
    store.commit(
        Commit(
            instances=[
                InstanceWrite(
                    state(i, account_id=a, status=status),
                    None,
                    launch(i, account_id=a, volume_name=volume),
                )
                for i, a, volume, status in ROWS
            ]
        )
    )
    assert store.instances_naming_volume(account, name, limit=limit) == expected


def test_a_user_deleted_later_no_longer_keeps_the_volume_in_use(store: Store) -> None:
    """The status is written on every update, the volume's name once with the launch."""
    running = state("i-0001", status=S.RUNNING)
    store.commit(
        Commit(instances=[InstanceWrite(running, None, launch("i-0001", volume_name="v"))])
    )
    assert store.instances_naming_volume("acct-1", "v") == ["i-0001"]
    gone = state("i-0001", status=S.DELETED)
    store.commit(Commit(instances=[InstanceWrite(gone, 1)]))
    assert store.instances_naming_volume("acct-1", "v") == []


def test_the_users_read_is_an_index_search_not_a_table_scan_on_sqlite(tmp_path: Path) -> None:
    """The very statement `instances_naming_volume` sends: SQLite searches the partial index
    `ix_instances_account_volume` at (account_id, volume_name), and sorts nothing."""
    searched = sqlite_plan_of_instances_read(
        tmp_path, lambda store: store.instances_naming_volume("acct-1", "ckpts", limit=6)
    )
    assert "ix_instances_account_volume (account_id=? AND volume_name=?)" in searched, searched
    assert "SCAN instances" not in searched and "TEMP B-TREE" not in searched, searched
