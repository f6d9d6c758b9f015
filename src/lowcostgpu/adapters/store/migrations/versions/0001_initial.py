"""The first schema: instances, outbox, events, usage, metered_through, volumes.

Written out by hand (not imported from `schema.py`) so that this revision keeps meaning the same
thing when the tables change later; a test checks that head matches `schema.py`.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "instances",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("account_id", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("launch", sa.Text, nullable=False),
    )
    _partial_index("ix_instances_live", "instances", "id", "status <> 'deleted'")
    op.create_table(
        "outbox",
        sa.Column("position", _BIG_ID, primary_key=True, autoincrement=True),
        sa.Column("key", sa.Text, nullable=False, unique=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("done_at", sa.BigInteger, nullable=True),
    )
    _partial_index("ix_outbox_pending", "outbox", "position", "done_at IS NULL")
    _events()
    _usage()
    op.create_table(
        "metered_through",
        sa.Column("subject_id", sa.Text, primary_key=True),
        sa.Column("kind", sa.Text, primary_key=True),
        sa.Column("through", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "volumes",
        sa.Column("account_id", sa.Text, primary_key=True),
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("size_gb", sa.Integer, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("deleted_at", sa.BigInteger, nullable=True),
    )


def _events() -> None:
    op.create_table(
        "events",
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("key", sa.Text, nullable=False, unique=True),
        sa.Column("at", sa.BigInteger, nullable=False),
        sa.Column("account_id", sa.Text, nullable=False),
        sa.Column("object_kind", sa.Text, nullable=False),
        sa.Column("object_id", sa.Text, nullable=False),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
    )
    op.create_index("ix_events_account_seq", "events", ["account_id", "seq"])


def _usage() -> None:
    op.create_table(
        "usage",
        sa.Column("subject_id", sa.Text, primary_key=True),
        sa.Column("kind", sa.Text, primary_key=True),
        sa.Column("interval_start", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("account_id", sa.Text, nullable=False),
        sa.Column("resource", sa.Text, nullable=False),
        sa.Column("capacity_class", sa.Text, nullable=True),
        sa.Column("interval_end", sa.BigInteger, nullable=False),
        sa.Column("seconds", sa.BigInteger, nullable=False),
        sa.Column("quantity", sa.BigInteger, nullable=False),
        sa.Column("quantity_s", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_usage_account_interval", "usage", ["account_id", "interval_start"])


def _partial_index(name: str, table: str, column: str, where: str) -> None:
    op.create_index(
        name, table, [column], sqlite_where=sa.text(where), postgresql_where=sa.text(where)
    )


def downgrade() -> None:
    for table in ("volumes", "metered_through", "usage", "events", "outbox", "instances"):
        op.drop_table(table)
