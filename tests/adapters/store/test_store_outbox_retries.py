"""The outbox's retry state (migration 0009), on every backend: failures are written on their
entries, only due entries are read, and a count never moves back."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from store_support import Backend, store_at_revision

from lowcostgpu.adapters.store import SqlStore
from lowcostgpu.adapters.store.engine import parse_url
from lowcostgpu.adapters.store.migrate import alembic_config, current_revision
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import Commit, OutboxEntry, OutboxFailure


def entry(key: str) -> OutboxEntry:
    return OutboxEntry(key=key, kind="KillWorkload", payload={"allocation_id": key}, created_at=10)


def keys(entries: list[OutboxEntry]) -> list[str]:
    return [e.key for e in entries]


def test_a_new_entry_is_due_at_once_with_no_attempts(store: Store) -> None:
    store.commit(Commit(outbox=[entry("a")]))
    [a] = store.pending_outbox(due_at=0)
    assert (a.attempts, a.next_attempt_at, a.last_error) == (0, 0, "")


def test_a_failure_is_written_on_its_entry_and_read_back(store: Store) -> None:
    store.commit(Commit(outbox=[entry("a"), entry("b")]))
    store.record_failures([OutboxFailure("a", 1, 105, "OSError: File too large (errno 27)")])
    a, b = store.pending_outbox()
    assert (a.key, a.attempts, a.next_attempt_at) == ("a", 1, 105)
    assert a.last_error == "OSError: File too large (errno 27)"
    assert (b.attempts, b.next_attempt_at, b.last_error) == (0, 0, "")


@pytest.mark.parametrize(("due_at", "due"), [(104, ["b"]), (105, ["a", "b"]), (None, ["a", "b"])])
def test_only_entries_due_by_then_are_read_in_insertion_order(
    store: Store, due_at: int | None, due: list[str]
) -> None:
    """Boundary pair around the next attempt (105): one second before it is not read."""
    store.commit(Commit(outbox=[entry("a"), entry("b")]))
    store.record_failures([OutboxFailure("a", 1, 105, "boom")])
    assert keys(store.pending_outbox(due_at=due_at)) == due


def test_the_limit_counts_due_entries_only(store: Store) -> None:
    store.commit(Commit(outbox=[entry(k) for k in "abcd"]))
    store.record_failures([OutboxFailure("a", 1, 500, "x"), OutboxFailure("b", 1, 500, "x")])
    assert keys(store.pending_outbox(limit=1, due_at=100)) == ["c"]
    assert keys(store.pending_outbox(limit=2, due_at=100)) == ["c", "d"]
    assert store.pending_outbox(limit=0, due_at=100) == []


@pytest.mark.parametrize(("attempts", "written"), [(2, True), (1, False), (0, False)])
def test_an_older_attempt_never_moves_the_count_back(
    store: Store, attempts: int, written: bool
) -> None:
    """Two carriers of one entry (a request thread and the loop) may both write: the count only
    grows, so an attempt no newer than the stored one writes nothing."""
    store.commit(Commit(outbox=[entry("a")]))
    store.record_failures([OutboxFailure("a", 1, 105, "first")])
    store.record_failures([OutboxFailure("a", attempts, 999, "second")])
    [a] = store.pending_outbox()
    assert (a.attempts, a.next_attempt_at, a.last_error) == (
        (attempts, 999, "second") if written else (1, 105, "first")
    )


def test_a_done_entry_or_an_unknown_key_takes_no_failure(store: Store) -> None:
    store.commit(Commit(outbox=[entry("a")]))
    store.mark_done(["a"], at=50)
    store.record_failures([OutboxFailure("a", 1, 105, "late"), OutboxFailure("zz", 1, 1, "x")])
    store.record_failures([])
    assert store.pending_outbox() == []
    store.commit(Commit(outbox=[entry("a")]))  # replayed: still done, and no row appears
    assert store.pending_outbox() == []


def test_a_replayed_commit_keeps_the_retry_state_of_its_entry(store: Store) -> None:
    store.commit(Commit(outbox=[entry("a")]))
    store.record_failures([OutboxFailure("a", 3, 105, "boom")])
    store.commit(Commit(outbox=[entry("a")]))
    [a] = store.pending_outbox()
    assert (a.attempts, a.next_attempt_at) == (3, 105)


def test_the_retry_state_survives_reopening_the_store(sql_backend: Backend) -> None:
    first, reopened = sql_backend.open(), sql_backend.open()  # as a restarted server would
    first.commit(Commit(outbox=[entry("a")]))
    first.record_failures([OutboxFailure("a", 2, 105, "boom")])
    [a] = reopened.pending_outbox()
    assert (a.attempts, a.next_attempt_at, a.last_error) == (2, 105, "boom")
    assert reopened.pending_outbox(due_at=104) == []


def test_the_due_read_walks_the_partial_index_on_sqlite(tmp_path: Path) -> None:
    """O(due): SQLite reads the due range of `ix_outbox_due`, not the table."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    SqlStore.open(url).close()
    engine = sa.create_engine(parse_url(url).url)
    try:
        with engine.connect() as conn:
            plan = conn.execute(
                sa.text(
                    "EXPLAIN QUERY PLAN SELECT * FROM outbox WHERE done_at IS NULL"
                    " AND next_attempt_at <= 5 ORDER BY position LIMIT 10"
                )
            ).all()
    finally:
        engine.dispose()
    assert any("ix_outbox_due" in str(row) for row in plan), plan


def _outbox_shape(engine: sa.Engine) -> tuple[set[str], set[str]]:
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        columns = {c["name"] for c in inspector.get_columns("outbox")}
        indexes = {str(i["name"]) for i in inspector.get_indexes("outbox")}
    return columns, indexes


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_0009_gives_existing_entries_a_due_retry_state_and_downgrades_cleanly(
    dialect: str, tmp_path: Path
) -> None:
    insert = sa.text(
        "INSERT INTO outbox (key, kind, payload, created_at, attempts, done_at)"
        " VALUES (:k, 'KillWorkload', '{}', 10, 0, :done)"
    )
    with store_at_revision("0008", dialect, tmp_path) as (url, engine):
        with engine.begin() as conn:
            conn.execute(insert, [{"k": "pending", "done": None}, {"k": "done", "done": 20}])
        store = SqlStore.open(url)
        try:
            [old] = store.pending_outbox(due_at=0)
            assert (old.key, old.attempts, old.next_attempt_at, old.last_error) == (
                "pending",
                0,
                0,
                "",
            )
        finally:
            store.close()
        columns, indexes = _outbox_shape(engine)
        assert {"next_attempt_at", "last_error"} <= columns and "ix_outbox_due" in indexes
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0008")
        assert current_revision(engine) == "0008"
        columns, indexes = _outbox_shape(engine)
        assert not {"next_attempt_at", "last_error"} & columns
        assert "ix_outbox_pending" in indexes and "ix_outbox_due" not in indexes
        with engine.connect() as conn:
            assert conn.scalar(sa.text("SELECT count(*) FROM outbox")) == 2
