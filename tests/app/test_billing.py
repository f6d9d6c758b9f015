"""Prepaid balances: usage is charged once per record, BalanceLow fires once per crossing."""

from __future__ import annotations

from decimal import Decimal

import pytest
from plane_world import World

from lowcostgpu.app.accounts import Accounts, hash_key
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.core.rating import build_invoice
from lowcostgpu.domain.errors import PaymentRequired
from lowcostgpu.domain.events import Reason


def setup(credit: str) -> tuple[World, Accounts, str]:
    w = World()
    accounts = Accounts(w.store, w.clock, w.plane.ids)
    account, key = accounts.create_account("acme")
    assert w.store.api_key(hash_key(key)) is not None
    if Decimal(credit) > 0:
        accounts.topup(account.id, credit)
    return w, accounts, account.id


def run_for(w: World, seconds: int, step_s: int = 30) -> None:
    for _ in range(seconds // step_s):
        w.tick(step_s)


def test_each_usage_record_is_charged_once_and_the_balance_matches_the_invoice() -> None:
    w, accounts, acct = setup("100")
    w.plane.launch(LaunchRequest(acct, "a100-sxm4", "interruptible", 8, command=("train",)))
    w.tick()
    run_for(w, 600)
    w.plane.tick()  # a repeated tick charges nothing twice
    records = w.store.usage(account_id=acct)
    assert records
    charges = [e for e in w.store.ledger(acct) if e.kind == "charge"]
    assert len(charges) == len(records)
    invoice = build_invoice(acct, records, w.plane.catalog, 0, w.clock.now() + 1)
    spent = Decimal(100) - accounts.balance(acct)
    assert abs(spent - invoice.total_exact.amount) < Decimal("1e-15")


def test_balance_low_fires_once_when_the_balance_crosses_the_threshold() -> None:
    # 8 A100 interruptible = 1.872 $/h = 0.0312 $/min: $1.10 crosses $1.00 within 4 minutes.
    w, accounts, acct = setup("1.10")
    w.plane.launch(LaunchRequest(acct, "a100-sxm4", "interruptible", 8, command=("train",)))
    w.tick()
    run_for(w, 1200)
    low = [e for e in w.store.events(account_id=acct) if e.reason is Reason.BALANCE_LOW]
    assert len(low) == 1
    assert low[0].object_kind == "account" and "top up" in low[0].message
    accounts.topup(acct, "5")
    run_for(w, 60)
    assert len([e for e in w.store.events() if e.reason is Reason.BALANCE_LOW]) == 1


def test_running_work_continues_below_zero_but_new_launches_are_refused() -> None:
    w, accounts, acct = setup("0.05")
    inst = w.plane.launch(LaunchRequest(acct, "a100-sxm4", "on-demand", 8, command=("serve",)))
    w.tick()
    run_for(w, 600)
    assert accounts.balance(acct) < 0
    assert w.store.instance(inst.state.id).state.status.value == "running"
    with pytest.raises(PaymentRequired, match="positive balance"):
        accounts.check_can_launch(acct)
