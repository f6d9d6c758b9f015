"""Webhook endpoints, their delivery outbox, and every delivery attempt.

Written out by hand, like 0001–0003, so that this revision keeps meaning the same thing later.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("account_id", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("endpoint_id", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
    )
    op.create_index(
        "ix_webhook_deliveries_order",
        "webhook_deliveries",
        ["endpoint_id", "seq", "created_at", "id"],
    )
    op.create_table(
        "webhook_attempts",
        sa.Column("delivery_id", sa.Text, primary_key=True),
        sa.Column("n", sa.Integer, primary_key=True),
        sa.Column("state", sa.Text, nullable=False),
    )


def downgrade() -> None:
    for table in ("webhook_attempts", "webhook_deliveries", "webhook_endpoints"):
        op.drop_table(table)
