"""The fleet's usage of a time window is read through an index on the interval's start.

The operator's stats (`GET /v1/operator/stats`: usage, revenue and reclaims per bucket of the
last day) read the usage records of their window with `Store.usage(since=, until=)`. An account's
window already had `ix_usage_account_interval`; across all accounts only the primary key
(subject, kind, interval start) was there, so the read scanned every record ever metered.

Written out by hand, like 0001–0012, so that this revision keeps meaning the same thing later.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision: str | None = "0012"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_index("ix_usage_interval", "usage", ["interval_start"])


def downgrade() -> None:
    op.drop_index("ix_usage_interval", table_name="usage")
