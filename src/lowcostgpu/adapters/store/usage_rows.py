"""Metering in the SQL store: usage records, how far each subject is metered, and volumes.

Usage rows are inserted once per (subject, kind, interval) and never updated (a replayed commit
inserts nothing); `metered_through` and volumes are upserted, the last value of a commit winning.
Used by `SqlStore` inside its write transaction, and for its reads.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from lowcostgpu.adapters.store import rows
from lowcostgpu.adapters.store import schema as t
from lowcostgpu.core.metering import MeterKey, UsageRecord
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.ports.store import VolumeRecord

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
            set_={c: stmt.excluded[c] for c in VOLUME_UPDATED},
        )
        conn.execute(stmt, [rows.volume_row(v) for v in last.values()])


def usage(conn: sa.Connection, text: Text, account_id: str | None) -> list[UsageRecord]:
    q = sa.select(t.usage)
    if account_id is not None:
        q = q.where(t.usage.c.account_id == account_id)
    q = q.order_by(t.usage.c.interval_start, text(t.usage.c.subject_id), text(t.usage.c.kind))
    return [rows.usage_record(r) for r in conn.execute(q).mappings()]


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
