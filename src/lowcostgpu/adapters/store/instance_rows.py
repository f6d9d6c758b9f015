"""Instances in the SQL store: versioned writes (optimistic concurrency) and reads.

An update must find its row at the expected version (`UPDATE ... WHERE id = ? AND version = ?`
hits exactly one row), a new instance must not exist yet; otherwise `StaleWrite` is raised and
`SqlStore.commit` rolls the whole transaction back.

The reads the served control plane makes as it grows are bounded by an index each:
`live_instances` by the partial index on the live statuses (O(live rows)), `page` by
(account_id, created_at, id) (O(limit) rows of one account), `with_prefix` by (account_id, id),
`naming_volume` by the partial (account_id, volume_name, id) of the ones naming a volume.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from lowcostgpu.adapters.store import rows, statements
from lowcostgpu.adapters.store import schema as t
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.domain.errors import NotFound, StaleWrite
from lowcostgpu.domain.status import InstanceStatus
from lowcostgpu.ports.store_records import InstanceWrite, StoredInstance

Insert = Callable[[sa.Table], Any]  # an INSERT that knows ON CONFLICT, for the dialect
Text = Callable[[sa.Column[Any]], sa.ColumnElement[Any]]  # text ordered by code point


def write(conn: sa.Connection, insert: Insert, w: InstanceWrite) -> None:
    if w.expected_version is None:
        stmt = statements.ignoring(insert, t.instances, ("id",))
        new = rows.new_instance_row(w)
        result = conn.execute(stmt, new, execution_options={"preserve_rowcount": True})
        if result.rowcount != 1:
            raise StaleWrite(
                f"instance {w.state.id} already exists",
                hint="someone created it first; re-read it and decide again",
            )
        return
    row = rows.instance_row(w.state)
    stmt = statements.versioned_update(t.instances, tuple(row))
    result = conn.execute(stmt, statements.versioned_params(row, w.expected_version))
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
    found = conn.execute(statements.INSTANCE, {"id": instance_id}).mappings().first()
    if found is None:
        raise NotFound(f"no instance {instance_id}", hint="list instances to see their ids")
    return rows.stored_instance(found)


def live_instances(conn: sa.Connection, text: Text) -> list[StoredInstance]:
    """The live instances, by id. The filter is the partial index's own predicate, as text, so
    the planner sees the index covers it (a bound IN list would not prove that to SQLite)."""
    q = sa.select(t.instances).where(sa.text(t.ACTIVE_PREDICATE))
    q = q.order_by(text(t.instances.c.id))
    return [rows.stored_instance(r) for r in conn.execute(q).mappings()]


def page(
    conn: sa.Connection,
    text: Text,
    account_id: str,
    limit: int,
    before: tuple[Timestamp, str] | None,
    statuses: frozenset[InstanceStatus] | None,
    include_deleted: bool,
) -> list[StoredInstance]:
    """One account's instances by (created_at, id) descending, strictly before `before`.

    `created_at <= c` is said on its own beside the (created_at, id) comparison so that the
    index range starts at the cursor even where the id's comparison is by code point (`text`,
    a collation the index does not have on PostgreSQL): the walk then reads the page's rows and
    only the ties on created_at, never the newer rows of the account."""
    c = t.instances.c
    q = sa.select(t.instances).where(c.account_id == account_id)
    if before is not None:
        at, last_id = before
        q = q.where(c.created_at <= at, sa.or_(c.created_at < at, text(c.id) < last_id))
    if statuses is not None:
        q = q.where(c.status.in_(sorted(s.value for s in statuses)))
    elif not include_deleted:
        q = q.where(c.status != rows.DELETED)
    q = q.order_by(c.created_at.desc(), text(c.id).desc()).limit(limit)
    return [rows.stored_instance(r) for r in conn.execute(q).mappings()]


def with_prefix(
    conn: sa.Connection, account_id: str, prefix: str, limit: int, include_deleted: bool
) -> list[StoredInstance]:
    """An account's instances whose id starts with `prefix`, by id, at most `limit`.

    The range [prefix, prefix + "zz") of `ix_instances_account_id` is one walk of the account's
    matching ids in any collation an id's alphabet (lower-case hex, letters, digits, dashes)
    sorts alike in; the `substr` test beside it keeps the answer exact whatever the collation
    puts in that range."""
    c = t.instances.c
    q = sa.select(t.instances).where(
        c.id >= prefix,
        c.id < prefix + "zz",
        sa.func.substr(c.id, 1, len(prefix)) == prefix,
        c.account_id == account_id,
    )
    if not include_deleted:
        q = q.where(c.status != rows.DELETED)
    q = q.order_by(c.id).limit(limit)
    return [rows.stored_instance(r) for r in conn.execute(q).mappings()]


def naming_volume(conn: sa.Connection, account_id: str, name: str, limit: int | None) -> list[str]:
    """The ids of an account's non-deleted instances that name volume `name`, by id, at most
    `limit` (None: all).

    One walk of `ix_instances_account_volume` at (account_id, name), which already holds the ids
    in order: O(the ids returned), never the account's other rows. The index's predicate is said
    as its own text so that SQLite's planner sees the index covers the query; the order is the
    index's (plain `id`, as `with_prefix`: an id's alphabet sorts alike in every collation), so
    the limit stops the walk."""
    c = t.instances.c
    q = (
        sa.select(c.id)
        .where(c.account_id == account_id, c.volume_name == name, sa.text(t.NAMING_A_VOLUME))
        .order_by(c.id)
    )
    if limit is not None:
        q = q.limit(limit)
    return list(conn.execute(q).scalars())
