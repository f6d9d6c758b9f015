"""Billing reads with a long usage history: what a customer's `bill`, `usage`, `balance` and an
instance's cost, and the operator's stats, cost when the store holds months of metering.

    .venv/bin/python bench/billing_reads.py                       # SQLite, 1,000,000 records
    .venv/bin/python bench/billing_reads.py --records 200000 --pg # and PostgreSQL

The store is filled through `Store.commit` as metering fills it: `--instances` instances of one
account (the customer asking) and as many of other accounts, each metered every 60 s, with one
charge per account per interval in the ledger (a metering pass's entries); `--records` usage
records in all. Each figure calls what its endpoint calls (`api/routes_billing.py`,
`api.models.UsageOut`, `app/operator_stats.py`), `--samples` times (median and worst, ms):

- `bill-day`: `GET /v1/billing?start=<a day ago>` of the customer; `bill-all`: since 0;
- `usage-100`: `GET /v1/billing/usage?limit=100`; `balance-20`: `GET /v1/billing/balance`;
- `instance-usage`: `GET /v1/instances/{id}/usage` of one of the customer's instances;
- `stats-series`: the operator's last day in hourly buckets; `revenue-total`: all-time revenue.

Nothing here is a timed test; the figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

from lowcostgpu.adapters.clock import FixedClock
from lowcostgpu.adapters.files import load_catalog
from lowcostgpu.adapters.store import SqlStore
from lowcostgpu.api import routes_billing
from lowcostgpu.api.context import ApiContext
from lowcostgpu.api.models import UsageOut
from lowcostgpu.app import operator_stats as stats
from lowcostgpu.app.plane import PlaneConfig
from lowcostgpu.core.metering import UsageRecord
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.ports.store_records import Commit, LedgerEntry
from plane_support import PG_URL, pg_schema

INTERVAL_S = 60
CUSTOMER = "acct-customer"


def fill(store: SqlStore, instances: int, records: int, now: int) -> None:
    """`records` usage records, half of them the customer's, ending at `now`."""
    subjects = [(CUSTOMER, f"i-c{n:05d}") for n in range(instances)]
    subjects += [(f"acct-other-{n % 50:02d}", f"i-o{n:05d}") for n in range(instances)]
    intervals = max(1, records // len(subjects))
    start = now - intervals * INTERVAL_S
    for k in range(intervals):
        at = start + k * INTERVAL_S
        usage = [
            UsageRecord(
                subject_id=subject,
                account_id=account,
                kind="gpu",
                resource="a100-sxm4",
                capacity_class=CapacityClass.INTERRUPTIBLE,
                interval_start=at,
                interval_end=at + INTERVAL_S,
                seconds=INTERVAL_S,
                quantity=1,
                quantity_s=INTERVAL_S,
            )
            for account, subject in subjects
        ]
        accounts = sorted({a for a, _ in subjects})
        ledger = [
            LedgerEntry(f"charge:{a}:{at}", a, at + INTERVAL_S, "charge", Decimal("-0.0039"))
            for a in accounts
        ]
        store.commit(Commit(usage=usage, ledger=ledger))


class Plane:
    """What the readers use of a plane: its store, catalog and clock."""

    def __init__(self, store: SqlStore, now: int) -> None:
        self.store = store
        self.catalog = load_catalog()
        self.clock = FixedClock(now)
        self.config = PlaneConfig()


def timed(fn: Callable[[], Any], samples: int) -> tuple[float, float]:
    out = []
    for _ in range(samples):
        t = time.perf_counter()
        fn()
        out.append(1000 * (time.perf_counter() - t))
    return statistics.median(out), max(out)


def run(url: str, args: Any, label: str) -> None:
    store = SqlStore.open(url)
    try:
        now = int(time.time()) // INTERVAL_S * INTERVAL_S
        t = time.perf_counter()
        fill(store, args.instances, args.records, now)
        print(f"# {label}: {args.records:,} records filled in {time.perf_counter() - t:.0f}s")
        plane: Any = Plane(store, now)
        ctx: Any = ApiContext(plane, None, None, Accounts(store), lambda: True)  # type: ignore[arg-type]
        window = stats.Window.ending(now, 86400, 3600)
        figures: dict[str, Callable[[], Any]] = {
            "bill-day": lambda: routes_billing.bill(ctx, CUSTOMER, now - 86400, None),
            "bill-all": lambda: routes_billing.bill(ctx, CUSTOMER, 0, None),
            "usage-100": lambda: routes_billing.usage(ctx, CUSTOMER, 100),
            "balance-20": lambda: routes_billing.balance(ctx, CUSTOMER, 20),
            "instance-usage": lambda: UsageOut.of("i-c00000", CUSTOMER, plane),
            "stats-series": lambda: stats.series(plane, window),
            "revenue-total": lambda: stats.revenue_total(plane),
        }
        for name, fn in figures.items():
            p50, worst = timed(fn, args.samples)
            print(f"{label:<7} {name:<15} {p50:>10.1f} {worst:>10.1f}", flush=True)
    finally:
        store.close()


class Accounts:
    """The one method of `app.accounts.Accounts` the billing routes use."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    def balance(self, account_id: str) -> Decimal:
        return self.store.balance(account_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--instances", type=int, default=100, help="the customer's (and others')")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--pg", action="store_true", help="also PostgreSQL at 127.0.0.1:5432")
    args = parser.parse_args()
    print("store   figure              p50_ms   worst_ms")
    with tempfile.TemporaryDirectory(prefix="bench-billing-") as tmp:
        run(f"sqlite:///{Path(tmp) / 'billing.db'}", args, "sqlite")
    if args.pg:
        with pg_schema(PG_URL) as url:
            run(url, args, "pg")


if __name__ == "__main__":
    main()
