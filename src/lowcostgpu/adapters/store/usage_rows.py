"""Metering in the SQL store: usage records, how far each subject is metered, and volumes.

Usage rows are inserted once per (subject, kind, interval) and never updated (a replayed commit
inserts nothing); `metered_through` and volumes are upserted, the last value of a commit winning.
Used by `SqlStore` inside its write transaction, and for its reads.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from lowcostgpu.adapters.store import pg_arrays, rows, windows
from lowcostgpu.adapters.store import schema as t
from lowcostgpu.core.metering import (
    IntervalUsage,
    MeterKey,
    UsageRecord,
    UsageTotal,
    interval_usage_order,
    usage_total_order,
)
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.ports.store_records import VolumeRecord

Insert = Callable[[sa.Table], Any]  # an INSERT that knows ON CONFLICT, for the dialect
Text = Callable[[sa.Column[Any]], sa.ColumnElement[Any]]  # text ordered by code point


VOLUME_UPDATED = ("size_gb", "created_at", "deleted_at", "history", "checkpoint_step")


def write(
    conn: sa.Connection,
    insert: Insert,
    usage: Sequence[UsageRecord],
    through: Mapping[MeterKey, Timestamp],
    volumes: Sequence[VolumeRecord],
) -> None:
    if usage:
        _insert_usage(conn, insert, usage)
    if through and conn.dialect.name == "postgresql":
        values = [{"subject_id": s, "kind": k, "through": at} for (s, k), at in through.items()]
        conn.execute(_PG_WATERMARKS, pg_arrays.arrays(t.metered_through, values))
    elif through:
        stmt = insert(t.metered_through)
        stmt = stmt.on_conflict_do_update(
            index_elements=["subject_id", "kind"], set_={"through": stmt.excluded.through}
        )
        values = [{"subject_id": s, "kind": k, "through": at} for (s, k), at in through.items()]
        conn.execute(stmt, values)
    if volumes:
        last = {(v.account_id, v.name): v for v in volumes}  # a statement may not hit a row twice
        stmt = insert(t.volumes)
        stmt = stmt.on_conflict_do_update(
            index_elements=["account_id", "name"],
            set_={c: stmt.excluded[c] for c in VOLUME_UPDATED},
        )
        conn.execute(stmt, [rows.volume_row(v) for v in last.values()])


def _insert_usage(conn: sa.Connection, insert: Insert, usage: Sequence[UsageRecord]) -> None:
    """Insert the records not stored yet, and add exactly those to their account's totals."""
    first: dict[tuple[str, str, int], dict[str, Any]] = {}
    for u in usage:  # of a key given twice the first is inserted, as the statement would
        row = rows.usage_row(u)
        first.setdefault((row["subject_id"], row["kind"], row["interval_start"]), row)
    if conn.dialect.name == "postgresql":
        conn.execute(_PG_INSERT_AND_ADD, pg_arrays.arrays(t.usage, first.values()))
        return
    c = t.usage.c
    stmt = insert(t.usage).on_conflict_do_nothing(index_elements=list(_KEY))
    inserted = stmt.returning(c.subject_id, c.kind, c.interval_start)
    added: dict[tuple[str, str, str, str], int] = {}
    for subject_id, kind, interval_start in conn.execute(inserted, list(first.values())):
        row = first[(subject_id, kind, interval_start)]
        line = (row["account_id"], row["kind"], row["resource"], row["capacity_class"] or "")
        added[line] = added.get(line, 0) + row["quantity_s"]
    if added:
        totals = t.usage_totals
        upsert = insert(totals)
        upsert = upsert.on_conflict_do_update(
            index_elements=list(_LINE),
            set_={"quantity_s": totals.c.quantity_s + upsert.excluded.quantity_s},
        )
        conn.execute(
            upsert.returning(totals.c.account_id),  # one multi-row statement, as the ledger's
            [dict(zip(_LINE, line, strict=True), quantity_s=q) for line, q in added.items()],
        )


_KEY = ("subject_id", "kind", "interval_start")
_LINE = ("account_id", "kind", "resource", "capacity_class")
_PG_WATERMARKS = sa.text(
    f"{pg_arrays.insert_rows(t.metered_through)}"
    " ON CONFLICT (subject_id, kind) DO UPDATE SET through = EXCLUDED.through"
)
_PG_INSERT_AND_ADD = sa.text(
    # The records inserted, and what was inserted added to the totals, in one statement of
    # constant text (`pg_arrays`), nothing sent back.
    f"WITH new AS ({pg_arrays.insert_rows(t.usage)}"
    " ON CONFLICT (subject_id, kind, interval_start) DO NOTHING"
    " RETURNING account_id, kind, resource, capacity_class, quantity_s)"
    " INSERT INTO usage_totals (account_id, kind, resource, capacity_class, quantity_s)"
    " SELECT account_id, kind, resource, COALESCE(capacity_class, ''), SUM(quantity_s) FROM new"
    " GROUP BY account_id, kind, resource, COALESCE(capacity_class, '')"
    " ON CONFLICT (account_id, kind, resource, capacity_class)"
    " DO UPDATE SET quantity_s = usage_totals.quantity_s + EXCLUDED.quantity_s"
)


def usage(
    conn: sa.Connection,
    text: Text,
    *,
    account_id: str | None,
    subject_id: str | None,
    since: Timestamp | None,
    until: Timestamp | None,
    last: int | None,
) -> list[UsageRecord]:
    """`Store.usage`. A subject's records are read by its key alone (its account is checked
    on the few found), so that the planner never walks the account's index instead."""
    c = t.usage.c
    q = _within(sa.select(t.usage), None if subject_id else account_id, subject_id, since, until)
    found = windows.oldest_first(
        conn, q, [c.interval_start, text(c.subject_id), text(c.kind)], last
    )
    return [rows.usage_record(r) for r in found if account_id in (None, r["account_id"])]


def usage_totals(
    conn: sa.Connection,
    *,
    account_id: str | None,
    subject_id: str | None,
    since: Timestamp | None,
    until: Timestamp | None,
) -> list[UsageTotal]:
    """`Store.usage_totals`: the kept totals for all time (O(lines)); a window's or a subject's
    with one GROUP BY over its rows (a subject's by its key alone, as in `usage`, its account
    checked on the totals)."""
    if subject_id is None and not since and until is None:
        return _kept_totals(conn, account_id)
    c = t.usage.c
    groups = (c.account_id, c.kind, c.resource, c.capacity_class)
    by = None if subject_id else account_id
    q = _within(sa.select(*groups, sa.func.sum(c.quantity_s)), by, subject_id, since, until)
    return _totals(conn.execute(q.group_by(*groups)), account_id)


def _kept_totals(conn: sa.Connection, account_id: str | None) -> list[UsageTotal]:
    c = t.usage_totals.c
    q = sa.select(c.account_id, c.kind, c.resource, c.capacity_class, c.quantity_s)
    if account_id is not None:
        q = q.where(c.account_id == account_id)
    return _totals(conn.execute(q), account_id)


def _totals(found: Iterable[Any], account_id: str | None) -> list[UsageTotal]:
    """(account, kind, resource, class, quantity) rows as totals of `account_id` (any, for
    None), in order; a class stored as NULL (usage) or '' (the kept totals) is none."""
    totals = [
        UsageTotal(a, rows.usage_kind(k), res, rows.capacity_class(cc or None), int(q_s))
        for a, k, res, cc, q_s in found
        if account_id in (None, a)
    ]
    return sorted(totals, key=usage_total_order)


def usage_by_interval(
    conn: sa.Connection, *, since: Timestamp | None, until: Timestamp | None
) -> list[IntervalUsage]:
    """`Store.usage_by_interval`: one GROUP BY over the window's rows."""
    c = t.usage.c
    groups = (c.interval_start, c.interval_end, c.kind, c.resource, c.capacity_class)
    q = _within(sa.select(*groups, sa.func.sum(c.quantity_s)), None, None, since, until)
    found = [
        IntervalUsage(
            kind=rows.usage_kind(k),
            resource=res,
            capacity_class=rows.capacity_class(cc),
            interval_start=a,
            interval_end=b,
            quantity_s=int(q_s),
        )
        for a, b, k, res, cc, q_s in conn.execute(q.group_by(*groups))
    ]
    return sorted(found, key=interval_usage_order)


def _within(
    q: sa.Select[Any],
    account_id: str | None,
    subject_id: str | None,
    since: Timestamp | None,
    until: Timestamp | None,
) -> sa.Select[Any]:
    c = t.usage.c
    if account_id is not None:
        q = q.where(c.account_id == account_id)
    if subject_id is not None:
        q = q.where(c.subject_id == subject_id)
    return windows.within(q, c.interval_start, since, until)


IN_CHUNK = 500  # subject ids per `IN (...)`: well under SQLite's and PostgreSQL's limits


def metered_through(
    conn: sa.Connection, subject_ids: Collection[str] | None = None
) -> dict[MeterKey, Timestamp]:
    """Every watermark, or those of `subject_ids` only (by the primary key, in chunks)."""
    if subject_ids is None:
        return _watermarks(conn.execute(sa.select(t.metered_through)).mappings())
    ids = sorted(set(subject_ids))
    found: dict[MeterKey, Timestamp] = {}
    for at in range(0, len(ids), IN_CHUNK):
        q = sa.select(t.metered_through).where(
            t.metered_through.c.subject_id.in_(ids[at : at + IN_CHUNK])
        )
        found.update(_watermarks(conn.execute(q).mappings()))
    return found


def _watermarks(found: Iterable[sa.RowMapping]) -> dict[MeterKey, Timestamp]:
    return {(r["subject_id"], rows.usage_kind(r["kind"])): r["through"] for r in found}


def metering_watermark(conn: sa.Connection) -> Timestamp | None:
    """The latest `through` of any subject: up to when the last metering pass went. Read once
    at a takeover; it scans the watermarks (one small row per subject ever metered)."""
    return conn.execute(sa.select(sa.func.max(t.metered_through.c.through))).scalar()


def volume(conn: sa.Connection, account_id: str, name: str) -> VolumeRecord | None:
    q = sa.select(t.volumes).where(t.volumes.c.account_id == account_id, t.volumes.c.name == name)
    found = conn.execute(q).mappings().first()
    return None if found is None else rows.volume_record(found)


def volumes(conn: sa.Connection, text: Text, account_id: str | None) -> list[VolumeRecord]:
    q = sa.select(t.volumes)
    if account_id is not None:
        q = q.where(t.volumes.c.account_id == account_id)
    q = q.order_by(text(t.volumes.c.account_id), text(t.volumes.c.name))
    return [rows.volume_record(r) for r in conn.execute(q).mappings()]
