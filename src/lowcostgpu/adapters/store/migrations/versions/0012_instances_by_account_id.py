"""An account's instances are found by id prefix through an index.

A short id (`lowcostgpu show c24`) is resolved by `Store.instances_with_prefix`: the account's
instances whose id starts with the prefix. Without this index the planner walked either the
primary key's range (the matching instances of every account) or the account's
(account_id, created_at, id) index (all of the account's own instances); with
`ix_instances_account_id` the walk is the account's matching ids only.

Written out by hand, like 0001–0011, so that this revision keeps meaning the same thing later.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_index("ix_instances_account_id", "instances", ["account_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_instances_account_id", table_name="instances")
