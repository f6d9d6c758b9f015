"""The ledger's writes and the balances kept beside it, in the SQL store's transaction.

A balance is the exact sum of its account's ledger entries. Summing the ledger on every read cost
O(ledger) per metering tick (the ledger grows by a row per metered record), so `account_balances`
keeps each sum, updated in the transaction that inserts the entries:

- only what the INSERT really inserted is added (`ON CONFLICT DO NOTHING ... RETURNING key`): an
  entry whose key exists — a replayed commit, or a concurrent writer that inserted it first —
  changes neither the ledger nor the balance, so the two always agree;
- the balance rows are locked before they are read and rewritten (PostgreSQL: `FOR UPDATE`, in
  account order, as the ledger keys are inserted in key order, so two writers never deadlock;
  SQLite: the write transaction already excludes every other writer), so no update is lost;
- the arithmetic is `rows.balances_after`, shared with the memory store: exact decimal text.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from decimal import Decimal
from typing import Any

import sqlalchemy as sa

from lowcostgpu.adapters.store import pg_arrays, rows, statements, windows
from lowcostgpu.adapters.store import schema as t
from lowcostgpu.domain.capacity import Timestamp
from lowcostgpu.ports.store_records import LedgerEntry

Insert = Callable[[sa.Table], Any]  # an INSERT that knows ON CONFLICT, for the dialect
Text = Callable[[sa.Column[Any]], sa.ColumnElement[Any]]  # text ordered by code point

_CHUNK = 500  # accounts per IN (...) list
_PG_INSERT = sa.text(  # one statement of constant text (`pg_arrays`)
    f"{pg_arrays.insert_rows(t.ledger)} ON CONFLICT (key) DO NOTHING RETURNING key"
)


def write(conn: sa.Connection, insert: Insert, text: Text, entries: Sequence[LedgerEntry]) -> None:
    """Insert the entries whose key is not stored yet, and add exactly those to the balances."""
    values = rows.first_per_key(entries)
    if not values:
        return
    if conn.dialect.name == "postgresql":
        inserted = set(conn.scalars(_PG_INSERT, pg_arrays.arrays(t.ledger, values)))
    else:
        stmt = insert(t.ledger).on_conflict_do_nothing(index_elements=["key"])
        inserted = set(conn.scalars(stmt.returning(t.ledger.c.key), values))
    new = [v for v in values if v["key"] in inserted]
    if not new:
        return
    accounts = sorted({v["account_id"] for v in new})
    after = rows.balances_after(_locked(conn, insert, text, accounts), new)
    bal = t.account_balances
    upsert = insert(bal)  # the rows exist and are locked: this only updates them
    upsert = upsert.on_conflict_do_update(
        index_elements=["account_id"], set_={"balance": upsert.excluded.balance}
    )
    conn.execute(
        upsert.returning(bal.c.account_id),  # see `_locked` for why RETURNING
        [{"account_id": a, "balance": after[a]} for a in accounts],
    )


def _locked(conn: sa.Connection, insert: Insert, text: Text, accounts: list[str]) -> dict[str, str]:
    """The balance of each of `accounts` (sorted), a row made at 0 for those that have none yet,
    every row locked until the transaction ends."""
    bal = t.account_balances
    # RETURNING makes SQLAlchemy send an executemany as one multi-row statement (its
    # "insertmanyvalues"), compiled once and cached; the rows it returns are not needed.
    zero = insert(bal).on_conflict_do_nothing(index_elements=["account_id"])
    conn.execute(
        zero.returning(bal.c.account_id), [{"account_id": a, "balance": "0"} for a in accounts]
    )
    current: dict[str, str] = {}
    for i in range(0, len(accounts), _CHUNK):
        query = (
            sa.select(bal.c.account_id, bal.c.balance)
            .where(bal.c.account_id.in_(accounts[i : i + _CHUNK]))
            .order_by(text(bal.c.account_id))
            .with_for_update()  # SQLite has no FOR UPDATE and needs none (see above)
        )
        current.update((a, b) for a, b in conn.execute(query))
    return current


def balances(conn: sa.Connection, text: Text) -> dict[str, Decimal]:
    bal = t.account_balances
    query = sa.select(bal.c.account_id, bal.c.balance).order_by(text(bal.c.account_id))
    return {account: rows.ledger_amount(b) for account, b in conn.execute(query)}


def ledger(
    conn: sa.Connection,
    text: Text,
    account_id: str | None,
    *,
    kind: str | None,
    since: Timestamp | None,
    until: Timestamp | None,
    last: int | None,
) -> list[LedgerEntry]:
    """`Store.ledger`, through the (account, at) index for one account."""
    c = t.ledger.c
    q = windows.within(sa.select(t.ledger), c.at, since, until)
    for column, value in ((c.account_id, account_id), (c.kind, kind)):
        if value is not None:
            q = q.where(column == value)
    found = windows.oldest_first(conn, q, [c.at, text(c.key)], last)
    return [rows.ledger_entry(r) for r in found]


def balances_of(conn: sa.Connection, account_ids: Collection[str]) -> dict[str, Decimal]:
    """Each account's balance, 0 where it has none; one query per `_CHUNK` accounts."""
    wanted = sorted(set(account_ids))
    found = dict.fromkeys(wanted, Decimal(0))
    bal = t.account_balances
    for at in range(0, len(wanted), _CHUNK):
        query = sa.select(bal.c.account_id, bal.c.balance).where(
            bal.c.account_id.in_(wanted[at : at + _CHUNK])
        )
        found.update((account, rows.ledger_amount(b)) for account, b in conn.execute(query))
    return found


def balance(conn: sa.Connection, account_id: str) -> Decimal:
    found = conn.scalar(statements.BALANCE, {"account_id": account_id})
    return Decimal(0) if found is None else rows.ledger_amount(found)
