"""The events indexed by (account, object, seq), so one object's events are read without the log.

An instance's timeline, a cluster's page and `GET /v1/events?object=` read one object's events
of an account in seq order; with only `ix_events_account_seq` (account_id, seq) the database
walked every event of the account to find them. The index leads with the account (every read is
one account's), then the object id — not its kind: callers name an object by its id alone
(`i-…`, `c-…`), and ids do not repeat across kinds — then seq, so the rows come in the order
they are returned and a `LIMIT` stops early.

Written out by hand, like 0001–0006, so that this revision keeps meaning the same thing later.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_index("ix_events_account_object", "events", ["account_id", "object_id", "seq"])


def downgrade() -> None:
    op.drop_index("ix_events_account_object", table_name="events")
