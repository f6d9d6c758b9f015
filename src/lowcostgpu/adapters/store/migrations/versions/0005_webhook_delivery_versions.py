"""A version on each webhook delivery, so that its writes are versioned like instances'.

Without it the worker's write of an attempt's outcome overwrote a replay that landed while the
attempt was in flight, and the replay was lost. Rows written before get version 1.

Written out by hand, like 0001–0004, so that this revision keeps meaning the same thing later.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.add_column(sa.Column("version", sa.Integer, nullable=False, server_default="1"))


def downgrade() -> None:
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.drop_column("version")
