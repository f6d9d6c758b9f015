"""Instances get their launch time as a column, and two indexes: the live ones, and pages.

The served control plane loads the live instances once when it gains the lead
(`Store.live_instances()`): `ix_instances_active` is a partial index on exactly the live statuses
(`domain.status.LIVE_INSTANCE_STATUSES`, written out here as they are at this revision), so that
read costs O(live instances), not O(every instance ever launched). The older `ix_instances_live`
(every instance that is not deleted) stays: `Store.instances()` still reads through it.

`GET /v1/instances` reads one account's instances a page at a time, newest first
(`Store.instances_page`): `created_at` copies the launch record's `created_at` out of its JSON,
and `ix_instances_account_created` on (account_id, created_at, id) gives the rows of one account
in page order, so a page costs O(limit). The upgrade fills `created_at` of existing rows from
their launch JSON, in Python (SQLite and PostgreSQL spell JSON functions differently), in
batches by id so a large table is never held in memory at once; a launch record without the field
(written before it existed) takes its default, 0, as the codec decodes it.

Written out by hand, like 0001–0007, so that this revision keeps meaning the same thing later.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

from lowcostgpu.adapters.store import codec
from lowcostgpu.adapters.store.errors import StoreDataError

revision = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None

ACTIVE = "status IN ('interrupted', 'interrupting', 'queued', 'running', 'starting', 'stopping')"
BATCH = 1000


def upgrade() -> None:
    op.add_column(
        "instances", sa.Column("created_at", sa.BigInteger, nullable=False, server_default="0")
    )
    _fill_created_at(op.get_bind())
    op.create_index(
        "ix_instances_active",
        "instances",
        ["id"],
        sqlite_where=sa.text(ACTIVE),
        postgresql_where=sa.text(ACTIVE),
    )
    op.create_index("ix_instances_account_created", "instances", ["account_id", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_instances_account_created", table_name="instances")
    op.drop_index("ix_instances_active", table_name="instances")
    with op.batch_alter_table("instances") as batch:  # SQLite rebuilds the table
        batch.drop_column("created_at")


def _fill_created_at(conn: sa.Connection) -> None:
    """Each row's `created_at` from its launch JSON, BATCH rows at a time (keyset by id)."""
    read = sa.text("SELECT id, launch FROM instances WHERE id > :last ORDER BY id LIMIT :n")
    write = sa.text("UPDATE instances SET created_at = :at WHERE id = :id")
    last = ""
    while True:
        batch = conn.execute(read, {"last": last, "n": BATCH}).all()
        if not batch:
            return
        conn.execute(write, [{"id": i, "at": _created_at(i, launch)} for i, launch in batch])
        last = batch[-1][0]


def _created_at(instance_id: str, launch: str) -> int:
    try:
        raw = json.loads(launch)
    except (TypeError, ValueError) as e:
        raise StoreDataError(
            f"the launch record of instance {instance_id} is not valid JSON: {e}",
            hint="the row was edited by hand: fix it, then open the store again",
        ) from None
    if not isinstance(raw, dict):
        raise StoreDataError(f"the launch record of instance {instance_id} is not an object")
    path = f"instance {instance_id}.launch.created_at"
    return int(codec.decode(int, raw.get("created_at", 0), path))
