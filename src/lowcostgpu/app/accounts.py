"""Accounts, API keys and the prepaid balance.

A key is shown once, when it is made; the store keeps only its SHA-256 (a random 256-bit key needs
no slow hash: nothing can be guessed from its digest). An admin key belongs to no account: it makes
accounts and keys and tops balances up, and owns nothing. Account keys own instances and volumes.

Top-ups are an operator's action (admin key): they record money received outside lowcostgpu, and
an account topping itself up would be credit for free. Launches are refused while the balance is
zero or below; running work is never stopped and no data is deleted because of the balance.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from dataclasses import dataclass
from decimal import Decimal

from lowcostgpu.domain.errors import Forbidden, InvalidRequest, PaymentRequired, Unauthenticated
from lowcostgpu.domain.money import parse_decimal
from lowcostgpu.ports.clock import Clock, IdSource
from lowcostgpu.ports.store import Store
from lowcostgpu.ports.store_records import AccountRecord, ApiKeyRecord, Commit, LedgerEntry

KEY_PREFIX = "lcg_"
ADMIN_KEY_PREFIX = "lcg_admin_"
PREFIX_SHOWN = 12  # characters of a key kept in clear, to tell keys apart in listings
MAX_TOPUP_USD = Decimal(1_000_000)
# USD as people write it on a wire: ASCII digits, at most cents. Python's Decimal also takes
# "1_000", " 5 ", "1e-30" and full-width digits, which credited amounts nobody meant.
TOPUP_AMOUNT = re.compile(r"[0-9]+(\.[0-9]{1,2})?", re.ASCII)
TOPUP_HINT = 'give the amount in USD as a string, e.g. "20.00"'
TOPUP_AMOUNT_PATTERN = r"^[0-9]+(\.[0-9]{1,2})?$"
LOGIN_HINT = "set LOWCOSTGPU_API_KEY or run `lowcostgpu login`; an admin makes keys"
KEY_CACHE_S = 30.0  # how long a known key is answered from memory before the store is asked again
KEY_CACHE_MAX = 10_000  # known keys kept; past that the cache starts over


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key(prefix: str = KEY_PREFIX) -> str:
    return prefix + secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: an account, or the admin (account_id None)."""

    account_id: str | None

    @property
    def admin(self) -> bool:
        return self.account_id is None


class Accounts:
    """Keys, accounts and balances.

    Known keys are kept in memory by their hash (`_known`, for `KEY_CACHE_S` at most), so that
    a request's authentication is a digest and a dict look-up, not a store read and a thread
    hop. Only keys the store knows are kept (an unknown key is asked about every time: a key
    made by another server works at once), and a key is only ever kept for `KEY_CACHE_S` after
    the store said it exists, which bounds how long a key taken away outside this process (no
    endpoint revokes keys today) could still be served; `forget_key` drops one at once."""

    def __init__(self, store: Store, clock: Clock, ids: IdSource) -> None:
        self.store = store
        self.clock = clock
        self.ids = ids
        self._known: dict[str, tuple[float, Principal]] = {}  # hash: (asked at, principal)
        self._known_lock = threading.Lock()

    # Keys ---------------------------------------------------------------------------------------

    def install_admin_key(self, key: str | None) -> str | None:
        """Make `key` an admin key; without one, make a key on first start and return it.

        Returns the key to show when one was generated (it cannot be shown again later).
        """
        if key is not None:
            if len(key) < 16:
                raise InvalidRequest(
                    "the admin key is too short", hint="use at least 16 random characters"
                )
            self._store_key(key, None)
            return None
        if any(k.account_id is None for k in self.store.api_keys()):
            return None
        key = new_key(ADMIN_KEY_PREFIX)
        self._store_key(key, None)
        return key

    def create_account(self, name: str) -> tuple[AccountRecord, str]:
        """A new account and its first key (shown once)."""
        name = name.strip()
        if not name or len(name) > 200:
            raise InvalidRequest("an account needs a name of 1 to 200 characters")
        account = AccountRecord(self.ids.new_id("acct"), name, self.clock.now())
        key = new_key()
        self.store.commit(Commit(accounts=[account], api_keys=[self._record(key, account.id)]))
        return account, key

    def create_key(self, account_id: str) -> str:
        self.store.account(account_id)  # NotFound first
        key = new_key()
        self._store_key(key, account_id)
        return key

    def authenticate(self, authorization: str | None) -> Principal:
        """Who sends this `Authorization` header; reads the store unless the key is known."""
        key_hash = _key_hash_of(authorization)
        known = self._cached(key_hash)
        if known is not None:
            return known
        record = self.store.api_key(key_hash)
        if record is None:
            raise Unauthenticated("unknown API key", hint=LOGIN_HINT)
        principal = Principal(record.account_id)
        with self._known_lock:
            if len(self._known) >= KEY_CACHE_MAX:
                self._known.clear()
            self._known[key_hash] = (time.monotonic(), principal)
        return principal

    def known(self, authorization: str | None) -> Principal | None:
        """The caller, if its key was found in the store in the last `KEY_CACHE_S`; else None
        (ask `authenticate`). No I/O: callable on the event loop. A missing or malformed
        header raises `Unauthenticated` here already."""
        return self._cached(_key_hash_of(authorization))

    def _cached(self, key_hash: str) -> Principal | None:
        found = self._known.get(key_hash)
        if found is None or time.monotonic() - found[0] >= KEY_CACHE_S:
            return None
        return found[1]

    def forget_key(self, key_hash: str) -> None:
        """Stop answering for a key from memory (a revocation must call this)."""
        with self._known_lock:
            self._known.pop(key_hash, None)

    def _store_key(self, key: str, account_id: str | None) -> None:
        self.store.commit(Commit(api_keys=[self._record(key, account_id)]))

    def _record(self, key: str, account_id: str | None) -> ApiKeyRecord:
        return ApiKeyRecord(hash_key(key), account_id, key[:PREFIX_SHOWN], self.clock.now())

    # Balance ------------------------------------------------------------------------------------

    def balance(self, account_id: str) -> Decimal:
        return self.store.balance(account_id)

    def topup(self, account_id: str, amount: str, reference: str | None = None) -> Decimal:
        """Credit the account; the same `reference` credits once however often it is sent."""
        self.store.account(account_id)
        try:
            value = parse_decimal(amount, what="the top-up amount")
        except InvalidRequest as exc:
            raise InvalidRequest(exc.message, hint=TOPUP_HINT) from None
        if value <= 0 or value > MAX_TOPUP_USD:
            raise InvalidRequest(
                f"a top-up must be more than $0 and at most ${MAX_TOPUP_USD}, got {amount}",
                hint=TOPUP_HINT,
            )
        if not TOPUP_AMOUNT.fullmatch(amount):
            raise InvalidRequest(
                f"a top-up amount is digits with at most two decimals, got {amount!r}",
                hint=f"{TOPUP_HINT} (no spaces, '_' or exponent)",
            )
        ref = reference or self.ids.new_id("topup")
        memo = f"top-up {ref}"
        entry = LedgerEntry(
            f"topup:{account_id}:{ref}", account_id, self.clock.now(), "topup", value, memo
        )
        self.store.commit(Commit(ledger=[entry]))
        return self.balance(account_id)

    def check_can_launch(self, account_id: str) -> None:
        balance = self.balance(account_id)
        if balance <= 0:
            raise PaymentRequired(
                f"the balance of account {account_id} is ${balance:f}: new launches need a "
                "positive balance (running work and volumes are kept)",
                hint="ask your operator to top the account up (`lowcostgpu topup`)",
                balance=f"{balance:f}",
            )


def _key_hash_of(authorization: str | None) -> str:
    if not authorization or not authorization.startswith("Bearer "):
        raise Unauthenticated(
            "missing API key", hint=f"send Authorization: Bearer KEY; {LOGIN_HINT}"
        )
    return hash_key(authorization.removeprefix("Bearer ").strip())


def require_admin(principal: Principal) -> None:
    if not principal.admin:
        raise Forbidden(
            "this needs the admin key",
            hint="the admin key is printed by `lowcostgpu serve` at its first start",
        )


def require_account(principal: Principal) -> str:
    if principal.account_id is None:
        raise Forbidden(
            "the admin key owns no instances",
            hint="use an account's key (`lowcostgpu accounts create NAME` makes one)",
        )
    return principal.account_id
