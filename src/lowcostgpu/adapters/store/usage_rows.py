"""Metering in the SQL store: usage records, how far each subject is metered, and volumes.

Usage rows are inserted once per (subject, kind, interval) and never updated (a replayed commit
inserts nothing); `metered_through` and volumes are upserted, the last value of a commit winning.
Used by `SqlStore` inside its write transaction, and for its reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from lowcostgpu.adapters.store import rows
from lowcostgpu.adapters.store import schema as t
from lowcostgpu.core.metering import MeterKey, UsageRecord
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.ports.store import VolumeRecord

Insert = Callable[[sa.Table], Any]  # an INSERT that knows ON CONFLICT, for the dialect
Text = Callable[[sa.Column[Any]], sa.ColumnElement[Any]]  # text ordered by code point


def write(
    conn: sa.Connection,
    insert: Insert,
    usage: Sequence[UsageRecord],
    through: Mapping[MeterKey, Timestamp],
    volumes: Sequence[VolumeRecord],
) -> None:
    if usage:
        keys = ["subject_id", "kind", "interval_start"]
        stmt = insert(t.usage).on_conflict_do_nothing(index_elements=keys)
        conn.execute(stmt, [rows.usage_row(u) for u in usage])
    if through:
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
            set_={c: stmt.excluded[c] for c in ("size_gb", "created_at", "deleted_at")},
        )
        conn.execute(stmt, [rows.volume_row(v) for v in last.values()])


def usage(conn: sa.Connection, text: Text, account_id: str | None) -> list[UsageRecord]:
    q = sa.select(t.usage)
    if account_id is not None:
        q = q.where(t.usage.c.account_id == account_id)
    q = q.order_by(t.usage.c.interval_start, text(t.usage.c.subject_id), text(t.usage.c.kind))
    return [rows.usage_record(r) for r in conn.execute(q).mappings()]


def metered_through(conn: sa.Connection) -> dict[MeterKey, Timestamp]:
    found = conn.execute(sa.select(t.metered_through)).mappings()
    return {(r["subject_id"], rows.usage_kind(r["kind"])): r["through"] for r in found}


def volumes(conn: sa.Connection, text: Text, account_id: str | None) -> list[VolumeRecord]:
    q = sa.select(t.volumes)
    if account_id is not None:
        q = q.where(t.volumes.c.account_id == account_id)
    q = q.order_by(text(t.volumes.c.account_id), text(t.volumes.c.name))
    return [rows.volume_record(r) for r in conn.execute(q).mappings()]
