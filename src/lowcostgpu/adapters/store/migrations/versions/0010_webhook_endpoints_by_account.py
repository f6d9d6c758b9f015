"""Webhook endpoints are found by account through an index.

Every commit that writes events reads the endpoints of those events' accounts (to queue their
deliveries in the same transaction: `adapters/store/webhook_rows.py`). Without an index that read
scanned every endpoint of every account, a cost per launch that grew with unrelated tenants.
`ix_webhook_endpoints_account` makes it O(the accounts' own endpoints).

Written out by hand, like 0001–0009, so that this revision keeps meaning the same thing later.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_index("ix_webhook_endpoints_account", "webhook_endpoints", ["account_id"])


def downgrade() -> None:
    op.drop_index("ix_webhook_endpoints_account", table_name="webhook_endpoints")
