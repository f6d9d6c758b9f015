"""Outbox entries keep their retry state, and the due ones are found through an index.

An effect that fails (a volume that cannot be made, a runtime that raises) must never block the
outbox for anyone else: its failure is written on its own entry and it is tried again after a
backoff (`core.retries`). `next_attempt_at` is when it is due again (0, the default of every
existing row: at once) and `last_error` why its last attempt failed; `attempts` already existed.

The loop reads the pending entries that are due at every tick (`Store.pending_outbox(due_at=)`):
`ix_outbox_due`, a partial index of the pending entries on (next_attempt_at, position), gives them
as one range, so entries waiting for a retry cost nothing per tick. It replaces
`ix_outbox_pending` (position alone), whose reads now also filter by `next_attempt_at`.

Written out by hand, like 0001–0008, so that this revision keeps meaning the same thing later.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None

PENDING = "done_at IS NULL"


def upgrade() -> None:
    op.add_column(
        "outbox", sa.Column("next_attempt_at", sa.BigInteger, nullable=False, server_default="0")
    )
    op.add_column("outbox", sa.Column("last_error", sa.Text, nullable=False, server_default=""))
    op.drop_index("ix_outbox_pending", table_name="outbox")
    op.create_index(
        "ix_outbox_due",
        "outbox",
        ["next_attempt_at", "position"],
        sqlite_where=sa.text(PENDING),
        postgresql_where=sa.text(PENDING),
    )


def downgrade() -> None:
    op.drop_index("ix_outbox_due", table_name="outbox")
    op.create_index(
        "ix_outbox_pending",
        "outbox",
        ["position"],
        sqlite_where=sa.text(PENDING),
        postgresql_where=sa.text(PENDING),
    )
    with op.batch_alter_table("outbox") as batch:  # SQLite rebuilds the table
        batch.drop_column("last_error")
        batch.drop_column("next_attempt_at")
