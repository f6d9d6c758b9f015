"""The event log in the SQL store: numbering new events, and reads filtered by the database.

Event `seq` numbers are assigned as max + 1 while the caller holds a lock that serializes event
writers (SQLite: the write transaction itself; PostgreSQL: a transaction-level advisory lock, see
`SqlStore`), so they grow strictly in commit order and a reader paging with `after_seq` never
skips a late commit.

Reads push every filter into the query, so a filtered page costs the rows it returns rather than
the account's whole history: one account's reads use `ix_events_account_seq` (account, seq), one
object's `ix_events_account_object` (account, object, seq; migration 0007), time windows
`ix_events_at`. A reason or an id prefix is matched by the database on the account's rows (no
index of its own: the rows are not sent, decoded or kept).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from lowcostgpu.adapters.store import rows, statements
from lowcostgpu.adapters.store import schema as t
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.ports.store import EventRecord

_CHUNK = 500  # keys per IN (...) list


def insert(conn: sa.Connection, events: Sequence[EventRecord]) -> list[tuple[EventRecord, int]]:
    """Insert the events whose key is not stored yet, numbered after the last one; the caller
    holds the event writers' lock. Returns each new event with its seq."""
    keys = list({e.key for e in events})
    seen: set[str] = set()
    for i in range(0, len(keys), _CHUNK):
        chunk = keys[i : i + _CHUNK]
        seen.update(conn.scalars(statements.EVENT_KEYS_STORED, {"keys": chunk}))
    seq = conn.scalar(statements.LAST_EVENT_SEQ) or 0
    new: list[tuple[EventRecord, int]] = []
    for e in events:
        if e.key not in seen:
            seen.add(e.key)
            seq += 1
            new.append((e, seq))
    if new:
        conn.execute(statements.INSERT_EVENTS, [rows.event_row(e, n) for e, n in new])
    return new


def select(
    *,
    after_seq: int,
    account_id: str | None,
    limit: int,
    since: Timestamp | None,
    until: Timestamp | None,
    object_kind: str | None,
    object_id: str | None,
    object_prefix: str | None,
    reason: str | None,
    before_seq: int | None,
    newest: bool,
) -> sa.Select[Any]:
    """The query of `Store.events`; with `newest` its rows come newest first (see `read`)."""
    c = t.events.c
    wanted: dict[sa.Column[Any], Any] = {
        c.account_id: account_id,
        c.object_kind: object_kind,
        c.object_id: object_id,
        c.reason: reason,
    }
    q = sa.select(t.events).where(c.seq > after_seq)
    q = q.where(*(col == v for col, v in wanted.items() if v is not None))
    if object_prefix is not None:  # exact on both dialects (SQLite's LIKE ignores case)
        q = q.where(sa.func.substr(c.object_id, 1, len(object_prefix)) == object_prefix)
    if since is not None:
        q = q.where(c.at >= since)
    if until is not None:
        q = q.where(c.at < until)
    if before_seq is not None:
        q = q.where(c.seq < before_seq)
    return q.order_by(c.seq.desc() if newest else c.seq).limit(limit)


def read(conn: sa.Connection, query: sa.Select[Any], newest: bool) -> list[EventRecord]:
    """The events of a `select` query, in seq order."""
    found = [rows.event_record(r) for r in conn.execute(query).mappings()]
    return found[::-1] if newest else found


def latest_seq(conn: sa.Connection, account_id: str | None) -> int:
    q = sa.select(sa.func.coalesce(sa.func.max(t.events.c.seq), 0))
    if account_id is not None:
        q = q.where(t.events.c.account_id == account_id)
    return int(conn.scalar(q) or 0)
