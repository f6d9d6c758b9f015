"""Accounts, API keys (hashed) and the prepaid balance's ledger.

Written out by hand, like 0001, so that this revision keeps meaning the same thing later.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "accounts",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("key_hash", sa.Text, primary_key=True),
        sa.Column("account_id", sa.Text, nullable=True),
        sa.Column("prefix", sa.Text, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_api_keys_account", "api_keys", ["account_id"])
    op.create_table(
        "ledger",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("account_id", sa.Text, nullable=False),
        sa.Column("at", sa.BigInteger, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("amount", sa.Text, nullable=False),
        sa.Column("memo", sa.Text, nullable=False),
    )
    op.create_index("ix_ledger_account_at", "ledger", ["account_id", "at"])


def downgrade() -> None:
    for table in ("ledger", "api_keys", "accounts"):
        op.drop_table(table)
