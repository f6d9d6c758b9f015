"""An account's instances are found by id prefix, and by the volume they name, through indexes.

A short id (`lowcostgpu show c24`) is resolved by `Store.instances_with_prefix`: the account's
instances whose id starts with the prefix. Without this index the planner walked either the
primary key's range (the matching instances of every account) or the account's
(account_id, created_at, id) index (all of the account's own instances); with
`ix_instances_account_id` the walk is the account's matching ids only.

A volume is in use while a non-deleted instance of its account names it
(`Store.instances_naming_volume`: on `GET /v1/volumes` and inside a delete's decision).
`volume_name` copies the launch record's `volume_name` out of its JSON (NULL: it names none),
and the partial index `ix_instances_account_volume` on (account_id, volume_name, id) of the
instances that are not deleted and name a volume gives one volume's users by id, so that
lookup costs O(its users) — not O(the account's history). The upgrade fills `volume_name` of
existing rows from their launch JSON in Python, in batches by id, as 0008 filled `created_at`.

Written out by hand, like 0001–0011, so that this revision keeps meaning the same thing later.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

from lowcostgpu.adapters.store import codec
from lowcostgpu.adapters.store.errors import StoreDataError

revision = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None

NAMING_A_VOLUME = "status <> 'deleted' AND volume_name IS NOT NULL"
BATCH = 1000


def upgrade() -> None:
    op.create_index("ix_instances_account_id", "instances", ["account_id", "id"])
    op.add_column("instances", sa.Column("volume_name", sa.Text, nullable=True))
    _fill_volume_name(op.get_bind())
    op.create_index(
        "ix_instances_account_volume",
        "instances",
        ["account_id", "volume_name", "id"],
        sqlite_where=sa.text(NAMING_A_VOLUME),
        postgresql_where=sa.text(NAMING_A_VOLUME),
    )


def downgrade() -> None:
    op.drop_index("ix_instances_account_volume", table_name="instances")
    with op.batch_alter_table("instances") as batch:  # SQLite rebuilds the table
        batch.drop_column("volume_name")
    op.drop_index("ix_instances_account_id", table_name="instances")


def _fill_volume_name(conn: sa.Connection) -> None:
    """Each row's `volume_name` from its launch JSON, BATCH rows at a time (keyset by id); rows
    naming no volume keep NULL (and are not written)."""
    read = sa.text("SELECT id, launch FROM instances WHERE id > :last ORDER BY id LIMIT :n")
    write = sa.text("UPDATE instances SET volume_name = :name WHERE id = :id")
    last = ""
    while True:
        batch = conn.execute(read, {"last": last, "n": BATCH}).all()
        if not batch:
            return
        named = [{"id": i, "name": _volume_name(i, launch)} for i, launch in batch]
        named = [r for r in named if r["name"]]
        if named:
            conn.execute(write, named)
        last = batch[-1][0]


def _volume_name(instance_id: str, launch: str) -> str | None:
    try:
        raw = json.loads(launch)
    except (TypeError, ValueError) as e:
        raise StoreDataError(
            f"the launch record of instance {instance_id} is not valid JSON: {e}",
            hint="the row was edited by hand: fix it, then open the store again",
        ) from None
    if not isinstance(raw, dict):
        raise StoreDataError(f"the launch record of instance {instance_id} is not an object")
    path = f"instance {instance_id}.launch.volume_name"
    name: str | None = codec.decode(str | None, raw.get("volume_name"), path)
    return name or None  # "" names no volume, as a launch record reads it
