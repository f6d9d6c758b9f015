"""The outbox in the SQL store: effects inserted once by key in a commit, marked done after.

`position` is the insertion order, `done_at` NULL while pending; a failed attempt is written on
its entry (`record_failures`), and a partial index on (next_attempt_at, position) of the pending
ones finds the due ones however long the history grows (see `schema`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from lowcostgpu.adapters.store import rows, statements
from lowcostgpu.adapters.store import schema as t
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.ports.store_records import OutboxEntry, OutboxFailure

Insert = Callable[[sa.Table], Any]  # an INSERT that knows ON CONFLICT, for the dialect

_CHUNK = 500  # keys per IN (...) list


def write(conn: sa.Connection, insert: Insert, entries: Sequence[OutboxEntry]) -> None:
    """Insert the entries whose key is not stored yet (a replayed commit inserts nothing)."""
    if entries:
        stmt = statements.ignoring(insert, t.outbox, ("key",))
        conn.execute(stmt, [rows.outbox_row(e) for e in entries])


def mark_done(conn: sa.Connection, keys: Sequence[str], at: Timestamp) -> None:
    """Mark the pending entries of `keys` done at `at` (those already done keep their time)."""
    unique = list(dict.fromkeys(keys))
    for i in range(0, len(unique), _CHUNK):
        conn.execute(statements.OUTBOX_DONE, {"keys": unique[i : i + _CHUNK], "at": at})


def record_failures(conn: sa.Connection, failures: Sequence[OutboxFailure]) -> None:
    """Write each failed attempt on its pending entry, unless it has seen as many already."""
    if failures:
        params = [
            {"k": f.key, "a": f.attempts, "n": f.next_attempt_at, "e": f.error} for f in failures
        ]
        conn.execute(statements.OUTBOX_FAILED, params)


def pending(conn: sa.Connection, limit: int, due_at: Timestamp | None) -> list[OutboxEntry]:
    """Effects not yet done (and due by `due_at`, if given), oldest first."""
    if limit <= 0:
        return []
    if due_at is None:
        found = conn.execute(statements.PENDING_OUTBOX, {"limit": limit}).mappings()
    else:
        found = conn.execute(statements.DUE_OUTBOX, {"limit": limit, "due_at": due_at}).mappings()
    return [rows.outbox_entry(r) for r in found]
