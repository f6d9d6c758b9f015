"""Clusters and their nodes, versioned like instances.

Written out by hand, like 0001 and 0002, so that this revision keeps meaning the same thing later.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "clusters",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("account_id", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
    )
    _partial_index("ix_clusters_live", "clusters", "id", "status <> 'deleted'")
    op.create_table(
        "nodes",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("cluster_id", sa.Text, nullable=False),
        sa.Column("account_id", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
    )
    op.create_index("ix_nodes_cluster", "nodes", ["cluster_id"])
    _partial_index("ix_nodes_live", "nodes", "id", "status <> 'removed'")


def _partial_index(name: str, table: str, column: str, where: str) -> None:
    op.create_index(
        name, table, [column], sqlite_where=sa.text(where), postgresql_where=sa.text(where)
    )


def downgrade() -> None:
    for table in ("nodes", "clusters"):
        op.drop_table(table)
