"""`--credit-lost-work` on the served path: the real ControlPlane on SQLite credits a reclaim's
lost work once, in the reclaim's own commit; off, nothing changes."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from plane_world import World

from lowcostgpu.adapters.store.sql import SqlStore
from lowcostgpu.api.app import create_app
from lowcostgpu.app.accounts import Accounts
from lowcostgpu.app.launch import LaunchRequest
from lowcostgpu.cli import billing
from lowcostgpu.domain.events import Reason
from lowcostgpu.ports.store import Commit, LedgerEntry, Store

NOTICE_AFTER_CHECKPOINT_S = 840  # 14 minutes of work since the last reported checkpoint


def _world(store: Store, *, credit: bool) -> World:
    w = World(store)
    w.plane.config = replace(w.plane.config, credit_lost_work=credit)
    return w


def _account(w: World, name: str) -> str:
    accounts = Accounts(w.store, w.clock, w.plane.ids)
    account, _ = accounts.create_account(name)
    accounts.topup(account.id, "100")
    return account.id


def _reclaimed(w: World, *, report: bool = True) -> tuple[str, str, str]:
    """An interruptible 8-GPU instance of one account runs, reports a checkpoint (or none),
    and is reclaimed 14 minutes later for another account's on-demand launch."""
    acct, other = _account(w, "acme"), _account(w, "globex")
    i = w.plane.launch(LaunchRequest(acct, "a100-sxm4", "interruptible", 8, command=("t",)))
    w.tick()
    w.tick(10)
    if report:
        w.plane.report_checkpoint(i.state.id, 100)
    w.clock.advance(NOTICE_AFTER_CHECKPOINT_S)
    w.plane.launch(LaunchRequest(other, "a100-sxm4", "on-demand", 8, command=("serve",)))
    assert Reason.PREEMPTED in [e.reason for e in w.store.events(account_id=acct)]
    return acct, other, i.state.id


def _credits(store: Store, account_id: str) -> list[LedgerEntry]:
    return [e for e in store.ledger(account_id) if e.kind == "credit"]


def _expected_usd(w: World) -> Decimal:
    rate = Fraction(w.plane.catalog.gpu("a100-sxm4").interruptible_per_gpu_hour.amount)
    exact = rate * 8 * NOTICE_AFTER_CHECKPOINT_S / 3600
    return Decimal(exact.numerator) / Decimal(exact.denominator)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def test_with_the_option_off_a_reclaim_writes_no_credit(db: str) -> None:
    w = _world(SqlStore.open(db), credit=False)
    acct, _, _ = _reclaimed(w)
    assert _credits(w.store, acct) == []


def test_with_the_option_on_a_reclaim_credits_the_work_since_the_checkpoint(db: str) -> None:
    w = _world(SqlStore.open(db), credit=True)
    acct, other, instance_id = _reclaimed(w)
    before = w.store.balance(acct)
    (credit,) = _credits(w.store, acct)
    assert credit.amount == _expected_usd(w) and credit.amount > 0
    assert credit.memo == (
        f"credit: work lost at reclaim of {instance_id} (8 GPU × 0:14:00 since last checkpoint)"
    )
    preempted = [e for e in w.store.events(account_id=acct) if e.reason is Reason.PREEMPTED]
    assert credit.at == preempted[0].at  # decided with the reclaim, dated at its notice
    assert _credits(w.store, other) == []  # the on-demand customer is credited nothing
    others = sum(e.amount for e in w.store.ledger(acct) if e.kind != "credit")  # top-up, charges
    assert before == others + credit.amount  # the balance includes the credit


def test_an_instance_that_reported_no_checkpoint_is_credited_nothing(db: str) -> None:
    w = _world(SqlStore.open(db), credit=True)
    acct, _, _ = _reclaimed(w, report=False)
    assert _credits(w.store, acct) == []


def test_the_credit_is_taken_once_across_a_replay_and_a_restart(db: str) -> None:
    w = _world(SqlStore.open(db), credit=True)
    acct, _, _ = _reclaimed(w)
    (credit,) = _credits(w.store, acct)
    balance = w.store.balance(acct)
    w.store.commit(Commit(ledger=[credit]))  # the same entry again: inserted unless it exists
    assert w.store.balance(acct) == balance
    restarted = _world(SqlStore.open(db), credit=True)  # a new server on the same database
    restarted.clock.advance(w.clock.now() - restarted.clock.now())
    for _ in range(5):
        restarted.tick(30)
    assert _credits(restarted.store, acct) == [credit]


class _FailsOnce:
    """A store whose first commit carrying a `Preempted` event fails: a crash at the reclaim."""

    def __init__(self, store: Store) -> None:
        self._store, self.failed = store, False

    def commit(self, commit: Commit) -> None:
        if not self.failed and any(e.reason is Reason.PREEMPTED for e in commit.events):
            self.failed = True
            raise ConnectionError("the database went away")
        self._store.commit(commit)

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


def test_a_reclaim_whose_commit_fails_credits_nothing_until_it_is_decided_again(
    db: str,
) -> None:
    store = _FailsOnce(SqlStore.open(db))
    w = _world(store, credit=True)  # type: ignore[arg-type]
    acct, other = _account(w, "acme"), _account(w, "globex")
    i = w.plane.launch(LaunchRequest(acct, "a100-sxm4", "interruptible", 8, command=("t",)))
    w.tick()
    w.tick(10)
    w.plane.report_checkpoint(i.state.id, 100)
    w.clock.advance(NOTICE_AFTER_CHECKPOINT_S)
    od = LaunchRequest(other, "a100-sxm4", "on-demand", 8, command=("serve",))
    with pytest.raises(ConnectionError):
        w.plane.launch(od)
    assert store.failed and _credits(store, acct) == []  # lost together with the reclaim
    w.plane.launch(od)  # decided again: one reclaim, one credit
    assert len(_credits(store, acct)) == 1


def test_the_bill_shows_the_credit_as_its_own_line_over_the_api_and_in_the_cli(db: str) -> None:
    w = _world(SqlStore.open(db), credit=True)
    acct, other, instance_id = _reclaimed(w)
    w.tick(60)  # a metering pass: the run's usage is charged
    accounts = Accounts(w.store, w.clock, w.plane.ids)
    keys = {a: accounts.create_key(a) for a in (acct, other)}
    app = create_app(w.plane, w.runtime, w.wired.tokens, lambda: True, accounts=accounts)
    with TestClient(app) as http:
        mine = http.get("/v1/billing", headers=_bearer(keys[acct])).json()
        theirs = http.get("/v1/billing", headers=_bearer(keys[other])).json()
        ledger = http.get("/v1/billing/balance", headers=_bearer(keys[acct])).json()["ledger"]
    (line,) = mine["credits"]
    exact = _expected_usd(w)
    assert line["description"] == _credits(w.store, acct)[0].memo
    assert Decimal(line["amount_exact"]) == exact  # --json: the exact value
    assert line["amount"] == f"{exact.quantize(Decimal('0.01'))}"
    assert Decimal(mine["total_after_credits"]) == Decimal(mine["total"]) - Decimal(line["amount"])
    assert theirs["credits"] == []  # one account never sees another's credit
    assert [e["kind"] for e in ledger].count("credit") == 1
    _, total = billing.bill_lines(mine, show_exact=False)
    (shown,) = billing.credit_lines(mine, show_exact=True)
    assert f"-${line['amount']}" in shown and f"reclaim of {instance_id}" in shown
    assert "0:14:00 since last checkpoint" in shown and f"(exact -${exact})" in shown
    assert f"credits -${line['amount']}" in total and "after credits" in total
    assert billing.credit_lines(theirs, show_exact=False) == []
    assert "credits" not in billing.bill_lines(theirs, show_exact=False)[1]


def _bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}
