"""The fleet's usage of a time window is read through an index, and each account's usage totals
are kept in a table of their own.

The operator's stats (`GET /v1/operator/stats`: usage, revenue and reclaims per bucket of the
last day) read the usage of their window with `Store.usage_by_interval(since=, until=)`. An
account's window already had `ix_usage_account_interval`; across all accounts only the primary
key (subject, kind, interval start) was there, so the read scanned every record ever metered:
`ix_usage_interval` is the window's index.

The all-time totals (an account's bill with no period, the operator's revenue since the start)
summed every record ever metered, which grow by one per subject per minute. `usage_totals` keeps
each account's billed quantity per kind, resource and capacity class ('' for none), added to by
the store in the transaction that inserts the records, as `account_balances` is for the ledger.
The upgrade fills it from the usage table with one GROUP BY.

Written out by hand, like 0001–0012, so that this revision keeps meaning the same thing later.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision: str | None = "0012"
branch_labels: str | None = None
depends_on: str | None = None

LINE = ("account_id", "kind", "resource", "capacity_class")


def upgrade() -> None:
    op.create_index("ix_usage_interval", "usage", ["interval_start"])
    op.create_table(
        "usage_totals",
        *(sa.Column(name, sa.Text, primary_key=True) for name in LINE),
        sa.Column("quantity_s", sa.BigInteger, nullable=False),
    )
    op.get_bind().execute(
        sa.text(
            "INSERT INTO usage_totals (account_id, kind, resource, capacity_class, quantity_s) "
            "SELECT account_id, kind, resource, COALESCE(capacity_class, ''), SUM(quantity_s) "
            "FROM usage GROUP BY account_id, kind, resource, COALESCE(capacity_class, '')"
        )
    )


def downgrade() -> None:
    op.drop_table("usage_totals")
    op.drop_index("ix_usage_interval", table_name="usage")
