"""Reading balances with a large ledger: summing the ledger (before) against the kept balances.

    .venv/bin/python bench/ledger.py                          # SQLite in a temp dir, 200k rows
    .venv/bin/python bench/ledger.py --pg                     # and PostgreSQL (a schema of its own)
    .venv/bin/python bench/ledger.py --rows 50000 --accounts 50

The ledger is filled through `Store.commit` as metering fills it: one commit per tick with one
charge for each account (20-place amounts), a top-up now and then. "before" is what
`balances()` did until migration 0006 — read every ledger row and sum each account's amounts
exactly — run here against the same database; "after" is `balances()` and `balance(account)`
reading `account_balances`. "tick commit" compares the write of one metering tick's charges:
the ledger insert alone (before) against the store's commit, which also updates the balances.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from lowcostgpu.adapters.store import SqlStore
from lowcostgpu.adapters.store import schema as t
from lowcostgpu.adapters.store.engine import WRITE, create_engine, parse_url
from lowcostgpu.adapters.store.rows import exact_sum, ledger_amount, ledger_row
from lowcostgpu.ports.store_records import Commit, LedgerEntry
from plane_support import pg_schema  # bench/ is on the path of a bench script

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
CHARGE = Decimal("-0.00400833333333333333")  # a minute of an interruptible rtx-5090 GPU


def tick(n: int, accounts: int, tag: str = "") -> list[LedgerEntry]:
    """One metering tick: a charge per account (a top-up every 100 ticks)."""
    at = 1_700_000_000 + 60 * n
    out = [
        LedgerEntry(f"{tag}charge:a{a}:{at}", f"acct-{a}", at, "charge", CHARGE * (1 + a % 7))
        for a in range(accounts)
    ]
    if n % 100 == 0:
        out += [
            LedgerEntry(f"{tag}topup:a{a}:{n}", f"acct-{a}", at, "topup", Decimal("20.00"))
            for a in range(accounts)
        ]
    return out


def summed_ledger(engine: sa.Engine) -> dict[str, Decimal]:
    """`balances()` before 0006: every ledger row read and summed."""
    with engine.connect() as conn:
        found = conn.execute(sa.select(t.ledger.c.account_id, t.ledger.c.amount))
        amounts: dict[str, list[Decimal]] = {}
        for account, amount in found:
            amounts.setdefault(account, []).append(ledger_amount(amount))
    return {account: exact_sum(values) for account, values in sorted(amounts.items())}


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def show(label: str, ms: list[float]) -> None:
    p90 = sorted(ms)[max(0, int(len(ms) * 0.9) - 1)]
    print(f"  {label:<34} median {statistics.median(ms):9.3f} ms   p90 {p90:9.3f} ms")


def bench(url: str, rows: int, accounts: int, repeats: int) -> None:
    store = SqlStore.open(url)
    engine = create_engine(parse_url(url))  # as the store's: same pragmas, same BEGIN
    try:
        start, n, written = time.perf_counter(), 0, 0
        while written < rows:
            entries = tick(n, accounts)
            store.commit(Commit(ledger=entries))
            written, n = written + len(entries), n + 1
        fill_s = time.perf_counter() - start
        print(f"  filled {written:,} ledger rows in {n:,} commits: {fill_s:.1f} s")
        assert summed_ledger(engine) == store.balances()
        show("balances(), before: sum the ledger", timed(lambda: summed_ledger(engine), repeats))
        show("balances(), after: the table", timed(store.balances, repeats))
        show("balance(one account), after", timed(lambda: store.balance("acct-1"), repeats))
        insert = (postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert)(
            t.ledger
        ).on_conflict_do_nothing(index_elements=["key"])
        ticks = iter(range(n, n + 2 * repeats))

        def ledger_only() -> None:
            with engine.connect().execution_options(**{WRITE: True}) as conn, conn.begin():
                conn.execute(insert, [ledger_row(e) for e in tick(next(ticks), accounts, "b")])

        def with_balances() -> None:
            store.commit(Commit(ledger=tick(next(ticks), accounts, "a")))

        show(f"tick commit ({accounts} charges), before", timed(ledger_only, repeats))
        show(f"tick commit ({accounts} charges), after", timed(with_balances, repeats))
    finally:
        store.close()
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="ledger rows to fill")
    parser.add_argument("--accounts", type=int, default=100, help="accounts (charges per tick)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--pg", action="store_true", help=f"also PostgreSQL at {PG_URL}")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(f"SQLite, {args.accounts} accounts:")
        bench(f"sqlite:///{Path(tmp) / 'store.db'}", args.rows, args.accounts, args.repeats)
    if args.pg:
        with pg_schema(PG_URL) as url:
            print(f"PostgreSQL, {args.accounts} accounts:")
            bench(url, args.rows, args.accounts, args.repeats)


if __name__ == "__main__":
    main()
