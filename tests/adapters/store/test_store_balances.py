"""Balances kept beside the ledger agree with the ledger, on every backend (memory, SQLite, PG).

The store no longer sums the ledger to answer `balances()`: it keeps each account's sum, updated
in the transaction that inserts entries. These tests hold it to what summing would give — the
same value and the same digits — through replays, duplicate keys, refused commits and concurrent
writers.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_support import Backend, empty_tables
from test_store_clusters import node

from lowcostgpu.adapters.store.rows import exact_sum
from lowcostgpu.domain.errors import InvalidRequest, StaleWrite
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import Commit, LedgerEntry, NodeWrite

ACCOUNTS = ["acct-1", "acct-2", "acct-3"]
KEYS = [f"k-{n}" for n in range(8)]  # few keys: replays and duplicates are frequent

# Up to 25 places, like a charge's 20-place amounts, and whole dollars like top-ups.
amounts = st.builds(
    lambda n, places: Decimal(n).scaleb(-places),
    st.integers(-(10**9), 10**9),
    st.integers(0, 25),
)
entries = st.builds(
    lambda key, account, at, amount: LedgerEntry(
        key, account, at, "topup" if amount > 0 else "charge", amount, memo=key
    ),
    st.sampled_from(KEYS),
    st.sampled_from(ACCOUNTS),
    st.integers(0, 1000),
    amounts,
)
# A commit whose ledger must not land: a NaN amount (refused before anything is written), or a
# node at a version it is not at (found after the SQL store wrote the ledger: rolled back).
spoilers = st.sampled_from([None, None, "stale", "malformed"])
commits = st.tuples(st.lists(entries, max_size=5), spoilers)


def summed(ledger: list[LedgerEntry]) -> dict[str, str]:
    """Each account's balance as summing the ledger gives it, digits included."""
    by_account: dict[str, list[Decimal]] = {}
    for e in ledger:
        by_account.setdefault(e.account_id, []).append(e.amount)
    return {a: f"{exact_sum(values):f}" for a, values in by_account.items()}


def digits(balances: dict[str, Decimal]) -> dict[str, str]:
    return {a: f"{b:f}" for a, b in balances.items()}


def make_commit(ledger: list[LedgerEntry], spoiler: str | None) -> Commit:
    if spoiler == "stale":
        return Commit(ledger=ledger, nodes=[NodeWrite(node("n-none"), 3)])
    if spoiler == "malformed":
        bad = LedgerEntry("k-bad", "acct-1", 1, "charge", Decimal("NaN"))
        return Commit(ledger=[*ledger, bad])
    return Commit(ledger=ledger)


def check(store: Store, model: dict[str, LedgerEntry]) -> None:
    """The balances are the exact sums of the ledger, and the ledger is the model's."""
    ledger = store.ledger()
    assert sorted(ledger, key=lambda e: e.key) == sorted(model.values(), key=lambda e: e.key)
    balances = store.balances()
    assert digits(balances) == summed(ledger)
    assert list(balances) == sorted(balances)  # by account
    for account in ACCOUNTS:
        assert store.balance(account) == balances.get(account, Decimal(0))
    some = [*ACCOUNTS[:2], "acct-never"]  # one read for several, 0 for one with no entries
    assert digits(store.balances_of(some)) == digits({a: balances.get(a, Decimal(0)) for a in some})
    assert store.balances_of([]) == {}


def fresh_store(backend: Backend) -> Callable[[], Store]:
    """A store emptied for each example (a new fake, or the same SQL store with empty tables)."""
    if backend.url is None:
        return backend.open
    url, store = backend.url, backend.open()

    def emptied() -> Store:
        empty_tables(url)
        return store

    return emptied


def test_random_commits_keep_balances_equal_to_the_sum_of_the_ledger(backend: Backend) -> None:
    fresh = fresh_store(backend)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(ops=st.lists(commits, min_size=1, max_size=8))
    def balances_follow_the_ledger(ops: list[tuple[list[LedgerEntry], str | None]]) -> None:
        store = fresh()
        model: dict[str, LedgerEntry] = {}  # what the ledger must hold: the first of each key
        landed: list[Commit] = []
        for ledger, spoiler in ops:
            commit = make_commit(ledger, spoiler)
            try:
                store.commit(commit)
            except (StaleWrite, InvalidRequest):
                assert spoiler is not None
            else:
                assert spoiler is None
                landed.append(commit)
                for e in ledger:
                    model.setdefault(e.key, e)
            check(store, model)
        before = store.balances()
        for commit in landed:  # every commit replayed, as after a crash: nothing changes
            store.commit(commit)
        assert digits(store.balances()) == digits(before)
        check(store, model)

    balances_follow_the_ledger()


def test_a_commit_that_carries_a_key_twice_takes_its_first_entry_once(store: Store) -> None:
    first = LedgerEntry("k", "acct-1", 1, "topup", Decimal("2.50"))
    second = LedgerEntry("k", "acct-2", 2, "topup", Decimal("7"))
    store.commit(Commit(ledger=[first, second, first]))
    assert store.ledger() == [first]
    assert digits(store.balances()) == {"acct-1": "2.50"}
    assert store.balance("acct-2") == 0


def test_concurrent_writers_with_overlapping_keys_lose_no_update(sql_backend: Backend) -> None:
    """Four stores (as four servers) write charges to the same accounts at once, each also
    replaying the others' keys in another order: every key lands once, every balance is its sum."""
    stores = [sql_backend.open() for _ in range(4)]
    shared = [
        LedgerEntry(f"shared-{n}", ACCOUNTS[n % 3], n, "charge", Decimal("-0.0040083333") * n)
        for n in range(40)
    ]
    errors: list[BaseException] = []

    def write(n: int) -> None:
        rng = random.Random(n)
        try:
            for i in range(15):
                mine = LedgerEntry(f"w{n}-{i}", ACCOUNTS[i % 3], i, "topup", Decimal("1.01"))
                replayed = rng.sample(shared, 6)
                stores[n].commit(Commit(ledger=[mine, *replayed]))
            stores[n].commit(Commit(ledger=shared))
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    ledger = stores[0].ledger()
    assert len(ledger) == 4 * 15 + 40
    assert digits(stores[0].balances()) == summed(ledger)
