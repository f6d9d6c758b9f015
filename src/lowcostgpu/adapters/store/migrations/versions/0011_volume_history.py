"""Volumes keep their earlier sizes and the last checkpoint step a workload on them reported.

A volume can be resized (grown) and deleted by its owner now (`/v1/volumes`): storage is billed
at the size of each moment, so the sizes before a resize are kept with the times they held
(`history`, JSON `[[start, end, size_gb], ...]`; `[]`, the default of every existing row: one
size since creation). `checkpoint_step` is the last step a workload on the volume reported
(NULL: none known), what a launch that attaches the volume says it resumes from.

Written out by hand, like 0001–0010, so that this revision keeps meaning the same thing later.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("volumes", sa.Column("history", sa.Text, nullable=False, server_default="[]"))
    op.add_column("volumes", sa.Column("checkpoint_step", sa.BigInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("volumes") as batch:
        batch.drop_column("checkpoint_step")
        batch.drop_column("history")
