"""Accounts, hashed API keys and the balance ledger, on every backend (memory, SQLite, PG)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from lowcostgpu.domain.errors import InvalidRequest, NotFound
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import AccountRecord, ApiKeyRecord, Commit, LedgerEntry


def entry(key: str, amount: str, account: str = "acct-1", at: int = 100) -> LedgerEntry:
    kind = "topup" if Decimal(amount) > 0 else "charge"
    return LedgerEntry(key, account, at, kind, Decimal(amount), memo=key)


def test_accounts_are_kept_and_a_second_insert_of_an_id_changes_nothing(store: Store) -> None:
    store.commit(Commit(accounts=[AccountRecord("acct-2", "beta", 5)]))
    store.commit(Commit(accounts=[AccountRecord("acct-1", "alpha", 7)]))
    store.commit(Commit(accounts=[AccountRecord("acct-1", "renamed", 9)]))
    assert [a.id for a in store.accounts()] == ["acct-1", "acct-2"]
    assert store.account("acct-1") == AccountRecord("acct-1", "alpha", 7)
    with pytest.raises(NotFound, match="no account acct-9"):
        store.account("acct-9")


def test_api_keys_are_found_by_hash_and_listed_per_account(store: Store) -> None:
    keys = [
        ApiKeyRecord("h-admin", None, "lcg_adm", 1),
        ApiKeyRecord("h-b", "acct-1", "lcg_bbb", 3),
        ApiKeyRecord("h-a", "acct-1", "lcg_aaa", 2),
        ApiKeyRecord("h-c", "acct-2", "lcg_ccc", 2),
    ]
    store.commit(Commit(api_keys=keys))
    assert store.api_key("h-a") == keys[2]
    assert store.api_key("h-admin") == keys[0]
    assert store.api_key("nope") is None
    assert [k.key_hash for k in store.api_keys("acct-1")] == ["h-a", "h-b"]
    assert len(store.api_keys()) == 4


def test_a_ledger_entry_is_taken_once_and_balances_are_exact_sums(store: Store) -> None:
    top = entry("topup-1", "10")
    charges = [entry(f"charge-{n}", "-0.00400833333333333333", at=200 + n) for n in range(3)]
    store.commit(Commit(ledger=[top, *charges]))
    store.commit(Commit(ledger=charges))  # a replayed commit charges nothing twice
    store.commit(Commit(ledger=[entry("topup-2", "0.1", account="acct-2")]))
    assert store.balances() == {
        "acct-1": Decimal("9.98797500000000000001"),
        "acct-2": Decimal("0.1"),
    }
    assert [e.key for e in store.ledger("acct-1")] == [
        "topup-1",
        "charge-0",
        "charge-1",
        "charge-2",
    ]
    assert store.ledger("acct-1")[1].amount == Decimal("-0.00400833333333333333")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (LedgerEntry("k", "a", 1, "gift", Decimal(1)), "unknown kind"),  # type: ignore[arg-type]
        (LedgerEntry("k", "a", 1, "topup", Decimal("NaN")), "finite Decimal"),
        (LedgerEntry("k", "a", 1, "topup", 1.5), "finite Decimal"),  # type: ignore[arg-type]
    ],
)
def test_a_malformed_ledger_entry_writes_nothing(
    store: Store, bad: LedgerEntry, message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        store.commit(Commit(accounts=[AccountRecord("acct-1", "a", 1)], ledger=[bad]))
    assert store.accounts() == []
    assert store.balances() == {}
