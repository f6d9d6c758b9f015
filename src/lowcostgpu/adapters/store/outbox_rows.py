"""The outbox in the SQL store: effects inserted once by key in a commit, marked done after.

`position` is the insertion order, `done_at` NULL while pending; a partial index keeps the pending
ones cheap to find however long the history grows (see `schema`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from lowcostgpu.adapters.store import rows, statements
from lowcostgpu.adapters.store import schema as t
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.ports.store import OutboxEntry

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
        conn.execute(
            sa.update(t.outbox)
            .where(t.outbox.c.key.in_(unique[i : i + _CHUNK]), t.outbox.c.done_at.is_(None))
            .values(done_at=at)
        )


def pending(conn: sa.Connection, limit: int) -> list[OutboxEntry]:
    """Effects not yet done, oldest first."""
    if limit <= 0:
        return []
    found = conn.execute(statements.PENDING_OUTBOX, {"limit": limit}).mappings()
    return [rows.outbox_entry(r) for r in found]
