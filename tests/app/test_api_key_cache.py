"""API keys known in memory (`Accounts.known`): a request's authentication reads the store only
for a key not seen in the last `KEY_CACHE_S`, and never answers for a key the store no longer
has for longer than that (or at all, once `forget_key` is called)."""

from __future__ import annotations

import pytest

from lowcostgpu.adapters.clock import FixedClock
from lowcostgpu.adapters.store.memory import MemoryStore
from lowcostgpu.app import accounts as accounts_module
from lowcostgpu.app.accounts import KEY_CACHE_S, Accounts, Principal, hash_key
from lowcostgpu.domain.errors import Unauthenticated
from lowcostgpu.ports.store_records import ApiKeyRecord


class Ids:
    def __init__(self) -> None:
        self.n = 0

    def new_id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.n}"


class CountingStore(MemoryStore):
    """Counts key look-ups; `gone` holds hashes taken away (what a revocation would do)."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0
        self.gone: set[str] = set()

    def api_key(self, key_hash: str) -> ApiKeyRecord | None:
        self.lookups += 1
        return None if key_hash in self.gone else super().api_key(key_hash)


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Monotonic:
    fake = Monotonic()
    monkeypatch.setattr(accounts_module.time, "monotonic", fake)
    return fake


def accounts_on(store: CountingStore) -> Accounts:
    return Accounts(store, FixedClock(1_000_000), Ids())


def test_a_known_key_is_answered_without_the_store(clock: Monotonic) -> None:
    store = CountingStore()
    accounts = accounts_on(store)
    account, key = accounts.create_account("acme")
    header = f"Bearer {key}"
    assert accounts.known(header) is None  # not seen yet: the caller asks the store
    assert accounts.authenticate(header) == Principal(account.id)
    assert accounts.known(header) == Principal(account.id)
    assert accounts.authenticate(header) == Principal(account.id)
    assert store.lookups == 1


def test_a_key_made_by_another_server_works_at_once(clock: Monotonic) -> None:
    store = CountingStore()
    here, there = accounts_on(store), accounts_on(store)
    with pytest.raises(Unauthenticated):
        here.authenticate("Bearer lcg_not-yet")
    account, key = there.create_account("acme")  # another server on the same store
    assert here.authenticate(f"Bearer {key}") == Principal(account.id)


@pytest.mark.parametrize(
    ("after_s", "served"),
    [(KEY_CACHE_S - 1, True), (KEY_CACHE_S, False), (KEY_CACHE_S * 10, False)],
)
def test_a_key_taken_away_is_refused_once_its_memory_expires(
    clock: Monotonic, after_s: float, served: bool
) -> None:
    store = CountingStore()
    accounts = accounts_on(store)
    _, key = accounts.create_account("acme")
    header = f"Bearer {key}"
    accounts.authenticate(header)
    store.gone.add(hash_key(key))
    clock.now += after_s
    if served:
        assert accounts.authenticate(header).account_id is not None
    else:
        assert accounts.known(header) is None
        with pytest.raises(Unauthenticated):
            accounts.authenticate(header)


def test_a_forgotten_key_is_asked_about_again_at_once(clock: Monotonic) -> None:
    store = CountingStore()
    accounts = accounts_on(store)
    _, key = accounts.create_account("acme")
    header = f"Bearer {key}"
    accounts.authenticate(header)
    store.gone.add(hash_key(key))
    accounts.forget_key(hash_key(key))
    with pytest.raises(Unauthenticated):
        accounts.authenticate(header)


@pytest.mark.parametrize("header", [None, "", "Basic abc", "bearer abc", "Token x"])
def test_a_missing_or_malformed_header_is_refused_before_any_look_up(
    clock: Monotonic, header: str | None
) -> None:
    store = CountingStore()
    accounts = accounts_on(store)
    with pytest.raises(Unauthenticated):
        accounts.known(header)
    with pytest.raises(Unauthenticated):
        accounts.authenticate(header)
    assert store.lookups == 0
