"""Each account's balance kept in a table of its own, and the events indexed by time.

A balance is the sum of its account's ledger entries. It was computed by reading the whole ledger
on every metering tick, and the ledger grows by a row per metered record: `account_balances`
keeps the sum instead, updated by the store in the transaction that inserts the entries. The
upgrade fills it from the ledger, summing in Python with exact decimals (the amounts are decimal
text, and SQLite has no exact number type), as exact decimal text like the amounts.

`ix_events_at` serves `Store.events(since=, until=)`, the time windows of the operator's history;
one account's reads already have `ix_events_account_seq` (account_id, seq).

Written out by hand, like 0001–0005, so that this revision keeps meaning the same thing later.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation, localcontext

import sqlalchemy as sa
from alembic import op

from lowcostgpu.adapters.store.errors import StoreDataError

revision = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "account_balances",
        sa.Column("account_id", sa.Text, primary_key=True),
        sa.Column("balance", sa.Text, nullable=False),
    )
    op.create_index("ix_events_at", "events", ["at"])
    balances = _ledger_sums(op.get_bind())
    if balances:
        op.get_bind().execute(
            sa.text("INSERT INTO account_balances (account_id, balance) VALUES (:a, :b)"),
            [{"a": account, "b": f"{total:f}"} for account, total in sorted(balances.items())],
        )


def downgrade() -> None:
    op.drop_index("ix_events_at", table_name="events")
    op.drop_table("account_balances")


def _ledger_sums(conn: sa.Connection) -> dict[str, Decimal]:
    """Each account's exact sum, streamed (the ledger may be large; the accounts are few)."""
    query = sa.text("SELECT account_id, amount FROM ledger")
    sums: dict[str, Decimal] = {}
    with localcontext() as ctx:
        ctx.prec = 1000  # as the store's sums: enough digits that nothing rounds
        for account, amount in conn.execute(query, execution_options={"stream_results": True}):
            sums[account] = sums.get(account, Decimal(0)) + _amount(account, amount)
    return sums


def _amount(account: str, text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite():
        raise StoreDataError(
            f"ledger amount {text!r} of account {account} is not a finite number",
            hint="the ledger was edited by hand: fix that row, then open the store again",
        )
    return value
