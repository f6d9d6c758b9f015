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
from functools import lru_cache
from typing import Any

import sqlalchemy as sa

from lowcostgpu.adapters.store import rows
from lowcostgpu.adapters.store import schema as t
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.ports.store import EventRecord

_CHUNK = 500  # events per INSERT (9 parameters each)


def insert(conn: sa.Connection, events: Sequence[EventRecord]) -> list[tuple[EventRecord, int]]:
    """Insert the events whose key is not stored yet, numbered after the last one in their
    order; the caller holds the event writers' lock. Returns each new event with its seq.

    One statement per `_CHUNK` events (`_numbered_insert`): the database skips the stored keys
    and numbers the rest, where a key look-up, a max(seq) and an insert were three."""
    unique = _first_of_each_key(events)
    seqs: dict[str, int] = {}
    for chunk in _chunks(unique):
        found = conn.execute(_numbered_insert(len(chunk)), _insert_params(chunk))
        seqs.update((k, s) for k, s in found)
    return _numbered(unique, seqs)


def _first_of_each_key(events: Sequence[EventRecord]) -> list[EventRecord]:
    """The events in order, a key given twice being the first one's."""
    first: dict[str, EventRecord] = {}
    for e in events:
        first.setdefault(e.key, e)
    return list(first.values())


def _chunks(events: list[EventRecord]) -> list[list[EventRecord]]:
    return [events[i : i + _CHUNK] for i in range(0, len(events), _CHUNK)]


def _insert_params(chunk: Sequence[EventRecord]) -> dict[str, Any]:
    """The parameters of `_numbered_insert(len(chunk))`."""
    params: dict[str, Any] = {}
    for n, e in enumerate(chunk):
        row = rows.event_row(e, 0)
        params.update({f"{c}{n}": row[c] for c in _COLUMNS})
    return params


def _numbered(unique: Sequence[EventRecord], seqs: dict[str, int]) -> list[tuple[EventRecord, int]]:
    """The inserted events (those `seqs` numbers) with their seq, in seq order."""
    return sorted(((e, seqs[e.key]) for e in unique if e.key in seqs), key=lambda p: p[1])


_COLUMNS = (
    "key",
    "at",
    "account_id",
    "object_kind",
    "object_id",
    "type",
    "reason",
    "message",
    "data",
)


@lru_cache(maxsize=_CHUNK)
def _numbered_insert(rows_n: int) -> sa.TextClause:
    """`INSERT ... SELECT` of `rows_n` events that numbers them after the last stored seq in
    their order, skips the keys already stored and returns (key, seq) of those it inserted.
    The same text on both dialects (a CTE of VALUES, window `row_number`, `RETURNING`: SQLite
    >= 3.35). The statement's max(seq) and NOT EXISTS do not see its own rows (one snapshot).
    Built once per number of rows (cached): SQLAlchemy's compiled cache then finds it too."""
    names = ", ".join(f'"{c}"' for c in _COLUMNS)
    values = ", ".join(
        "(" + ", ".join([str(i), *(f":{c}{i}" for c in _COLUMNS)]) + ")" for i in range(rows_n)
    )
    picked = ", ".join(f'CAST(v."{c}" AS {"BIGINT" if c == "at" else "TEXT"})' for c in _COLUMNS)
    return sa.text(
        f"WITH v(n, {names}) AS (VALUES {values}) "
        f"INSERT INTO events (seq, {names}) "
        "SELECT (SELECT coalesce(max(seq), 0) FROM events)"
        f" + row_number() OVER (ORDER BY v.n), {picked} FROM v "
        'WHERE NOT EXISTS (SELECT 1 FROM events AS e WHERE e."key" = v."key") '
        'RETURNING "key", seq'
    )


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
