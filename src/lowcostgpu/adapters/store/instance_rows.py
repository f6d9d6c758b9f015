"""Instances in the SQL store: versioned writes (optimistic concurrency) and reads.

An update must find its row at the expected version (`UPDATE ... WHERE id = ? AND version = ?`
hits exactly one row), a new instance must not exist yet; otherwise `StaleWrite` is raised and
`SqlStore.commit` rolls the whole transaction back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from lowcostgpu.adapters.store import rows
from lowcostgpu.adapters.store import schema as t
from lowcostgpu.domain.errors import NotFound, StaleWrite
from lowcostgpu.ports.store import InstanceWrite, StoredInstance

Insert = Callable[[sa.Table], Any]  # an INSERT that knows ON CONFLICT, for the dialect
Text = Callable[[sa.Column[Any]], sa.ColumnElement[Any]]  # text ordered by code point


def write(conn: sa.Connection, insert: Insert, w: InstanceWrite) -> None:
    if w.expected_version is None:
        stmt = insert(t.instances).on_conflict_do_nothing(index_elements=["id"])
        new = rows.new_instance_row(w)
        result = conn.execute(stmt, new, execution_options={"preserve_rowcount": True})
        if result.rowcount != 1:
            raise StaleWrite(
                f"instance {w.state.id} already exists",
                hint="someone created it first; re-read it and decide again",
            )
        return
    result = conn.execute(
        sa.update(t.instances)
        .where(t.instances.c.id == w.state.id, t.instances.c.version == w.expected_version)
        .values(**rows.instance_row(w.state), version=w.expected_version + 1)
    )
    if result.rowcount != 1:
        raise StaleWrite(
            f"instance {w.state.id} is no longer at version {w.expected_version}",
            hint="someone else wrote it first; re-read it and decide again",
        )


def instances(conn: sa.Connection, text: Text, include_deleted: bool) -> list[StoredInstance]:
    q = sa.select(t.instances)
    if not include_deleted:
        q = q.where(t.instances.c.status != rows.DELETED)
    q = q.order_by(text(t.instances.c.id))
    return [rows.stored_instance(r) for r in conn.execute(q).mappings()]


def instance(conn: sa.Connection, instance_id: str) -> StoredInstance:
    q = sa.select(t.instances).where(t.instances.c.id == instance_id)
    found = conn.execute(q).mappings().first()
    if found is None:
        raise NotFound(f"no instance {instance_id}", hint="list instances to see their ids")
    return rows.stored_instance(found)
