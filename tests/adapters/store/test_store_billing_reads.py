"""Billing reads by index, on every backend: usage of an account, a subject or a time window,
the newest N, totals summed by the store, and ledger entries of a kind, a window or the newest
N. Each filtered read equals the same filter applied to everything (`usage()`, `ledger()`), for
every combination of filters; on SQLite the statements are index searches, not table scans."""

from __future__ import annotations

import itertools
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest
from store_support import sqlite_plan_of_read

from lowcostgpu.core.metering import UsageRecord, usage_by_interval, usage_totals
from lowcostgpu.domain.capacity import CapacityClass
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import Commit, LedgerEntry, LedgerKind

SUBJECTS = [("acct-1", "i-1"), ("acct-1", "i-2"), ("acct-2", "i-3")]


def record(account: str, subject: str, start: int, klass: CapacityClass | None) -> UsageRecord:
    kind = "gpu" if klass is not None else "storage"
    return UsageRecord(
        subject_id=subject,
        account_id=account,
        kind=kind,
        resource="H100" if kind == "gpu" else f"{account}/vol",
        capacity_class=klass,
        interval_start=start,
        interval_end=start + 60,
        seconds=60,
        quantity=start // 60 + 1,  # every record a different quantity: sums are checked
        quantity_s=60 * (start // 60 + 1),
    )


def filled(store: Store) -> Store:
    usage = []
    for start in (0, 60, 120, 180):
        for account, subject in SUBJECTS:
            klass = CapacityClass.ON_DEMAND if subject == "i-2" else CapacityClass.INTERRUPTIBLE
            usage.append(record(account, subject, start, klass))
        usage.append(record("acct-1", "acct-1/vol", start, None))
    kinds: list[LedgerKind] = ["charge", "credit", "topup"]
    ledger = [
        LedgerEntry(f"k{n}", f"acct-{n % 2 + 1}", 10 * n, kinds[n % 3], Decimal(n) - 5)
        for n in range(12)
    ]
    store.commit(Commit(usage=usage, ledger=ledger))
    return store


ACCOUNTS = [None, "acct-1", "acct-2"]
WINDOWS = [(None, None), (60, None), (None, 120), (60, 180), (120, 120)]
LASTS = [None, 0, 1, 3, 100]


def test_a_usage_read_equals_its_filter_over_all_records(store: Store) -> None:
    everything = filled(store).usage()
    assert len(everything) == 16
    for account, subject, (since, until), last in itertools.product(
        ACCOUNTS, [None, "i-1", "i-3"], WINDOWS, LASTS
    ):
        expected = [
            r
            for r in everything
            if account in (None, r.account_id)
            and subject in (None, r.subject_id)
            and (since is None or r.interval_start >= since)
            and (until is None or r.interval_start < until)
        ]
        expected = expected if last is None else expected[max(0, len(expected) - last) :]
        got = store.usage(
            account_id=account, subject_id=subject, since=since, until=until, last=last
        )
        assert got == expected, (account, subject, since, until, last)


def test_usage_totals_are_the_sums_of_the_records_they_cover(store: Store) -> None:
    filled(store)
    for account, subject, (since, until) in itertools.product(
        ACCOUNTS, [None, "i-1", "i-3"], WINDOWS
    ):
        filters = {"account_id": account, "subject_id": subject, "since": since, "until": until}
        got = store.usage_totals(**filters)  # type: ignore[arg-type]
        assert got == usage_totals(store.usage(**filters)), filters  # type: ignore[arg-type]
    whole = store.usage_totals(account_id="acct-1")
    assert [(t.kind, t.resource, str(t.capacity_class), t.quantity_s) for t in whole] == [
        ("gpu", "H100", "interruptible", 600),
        ("gpu", "H100", "on-demand", 600),
        ("storage", "acct-1/vol", "None", 600),
    ]


def test_a_ledger_read_equals_its_filter_over_all_entries(store: Store) -> None:
    everything = filled(store).ledger()
    assert len(everything) == 12
    for account, kind, (since, until), last in itertools.product(
        ACCOUNTS, [None, "credit", "charge"], [(None, None), (30, 90), (None, 50)], LASTS
    ):
        expected = [
            e
            for e in everything
            if account in (None, e.account_id)
            and kind in (None, e.kind)
            and (since is None or e.at >= since)
            and (until is None or e.at < until)
        ]
        expected = expected if last is None else expected[max(0, len(expected) - last) :]
        got = store.ledger(account, kind=kind, since=since, until=until, last=last)  # type: ignore[arg-type]
        assert got == expected, (account, kind, since, until, last)


@pytest.mark.parametrize(
    ("read", "index"),
    [
        (lambda s: s.usage(account_id="acct-1", since=60, until=120), "ix_usage_account_interval"),
        (lambda s: s.usage(account_id="acct-1", last=100), "ix_usage_account_interval"),
        (lambda s: s.usage(account_id="acct-1", subject_id="i-1"), "sqlite_autoindex_usage_1"),
        (lambda s: s.usage(since=60, until=120), "ix_usage_interval"),
        (lambda s: s.usage_totals(account_id="acct-1", since=60), "ix_usage_account_interval"),
    ],
    ids=["account-window", "account-newest", "subject", "fleet-window", "account-totals"],
)
def test_usage_reads_search_an_index_on_sqlite(tmp_path: Path, read: object, index: str) -> None:
    plan = sqlite_plan_of_read(tmp_path, read, "usage")  # type: ignore[arg-type]
    assert index in plan, plan
    assert "SCAN usage" not in plan, plan


@pytest.mark.parametrize(
    "read",
    [
        lambda s: s.ledger("acct-1", last=20),
        lambda s: s.ledger("acct-1", kind="credit", since=0, until=100),
    ],
    ids=["newest", "credits-of-a-period"],
)
def test_ledger_reads_of_an_account_search_its_index_on_sqlite(
    tmp_path: Path, read: object
) -> None:
    plan = sqlite_plan_of_read(tmp_path, read, "ledger")  # type: ignore[arg-type]
    assert "ix_ledger_account_at" in plan and "SCAN ledger" not in plan, plan


def test_usage_by_interval_sums_the_fleets_records_of_each_interval(store: Store) -> None:
    filled(store)
    for since, until in WINDOWS:
        records = store.usage(since=since, until=until)
        assert store.usage_by_interval(since=since, until=until) == usage_by_interval(records)
    first = [u for u in store.usage_by_interval(until=60) if u.kind == "gpu"]
    assert [(str(u.capacity_class), u.quantity_s) for u in first] == [
        ("interruptible", 120),  # i-1 and i-3 (two accounts), 60 GPU-s each
        ("on-demand", 60),
    ]


def test_the_fleets_usage_by_interval_searches_its_index_on_sqlite(tmp_path: Path) -> None:
    plan = sqlite_plan_of_read(
        tmp_path,
        lambda s: s.usage_by_interval(since=60, until=120),
        "usage",
    )
    assert "ix_usage_interval" in plan and "SCAN usage" not in plan, plan


def test_kept_totals_count_each_record_once_through_replays_and_duplicates(store: Store) -> None:
    """All-time totals come from the table the store adds to as it inserts records: a replayed
    commit, and a key given twice in one commit (the first is kept), add nothing twice."""
    filled(store)
    again = record("acct-1", "i-1", 0, CapacityClass.INTERRUPTIBLE)
    new = record("acct-2", "i-3", 240, CapacityClass.INTERRUPTIBLE)
    store.commit(Commit(usage=[again, new, replace(new, quantity_s=10**9)]))
    store.commit(Commit(usage=[again, new]))
    everything = store.usage()
    assert len(everything) == 17
    assert store.usage_totals() == usage_totals(everything)
    for account in ("acct-1", "acct-2", "acct-none"):
        kept = store.usage_totals(account_id=account)
        assert kept == usage_totals(r for r in everything if r.account_id == account)
        assert kept == store.usage_totals(account_id=account, since=-1)  # summed from the rows
